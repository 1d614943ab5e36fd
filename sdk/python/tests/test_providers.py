"""The preflight input in provider request shapes."""

from __future__ import annotations

import unittest
from typing import List

from soba_sdk import (
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)
from soba_sdk.protocol import ModelMessage

# A preflight input: capsule, a user turn with an image, two calls (one interrupted), a system note.
INPUT: List[ModelMessage] = [
    {"role": "user", "content": [{"type": "text", "text": "# Context Capsule\nGoal: fix auth"}]},
    {"role": "user", "content": [
        {"type": "text", "text": "Why does this fail?"},
        {"type": "image", "media_type": "image/png", "data": "iVBORw0KGgo="},
    ], "entryId": "e1"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "check the test and the log"},
        {"type": "text", "text": "Looking."},
        {"type": "tool_call", "id": "c1", "name": "Bash", "input": {"command": "cargo test"}},
        {"type": "tool_call", "id": "c2", "name": "Read", "input": {"path": "log.txt"}},
    ], "entryId": "e2"},
    {"role": "tool", "content": [{"type": "text", "text": "1 failed"}], "toolCallId": "c1", "isError": True, "entryId": "e3"},
    {"role": "tool", "content": [{"type": "text", "text": "no result: interrupted"}], "toolCallId": "c2", "isError": True},
    {"role": "system", "content": [{"type": "text", "text": "The user switched branches."}], "entryId": "e4"},
    {"role": "user", "content": [{"type": "text", "text": "Go on."}], "entryId": "e5"},
]


class ProvidersTest(unittest.TestCase):
    maxDiff = None

    def test_anthropic_system_joined_roles_alternate_results_are_tool_result_blocks(self) -> None:
        r = to_anthropic(INPUT, "You are a coding agent.")
        self.assertEqual(r["system"], "You are a coding agent.\n\nThe user switched branches.")
        self.assertEqual(r["messages"], [
            {"role": "user", "content": [
                {"type": "text", "text": "# Context Capsule\nGoal: fix auth"},
                {"type": "text", "text": "Why does this fail?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "c1", "name": "Bash", "input": {"command": "cargo test"}},
                {"type": "tool_use", "id": "c2", "name": "Read", "input": {"path": "log.txt"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "1 failed"}], "is_error": True},
                {"type": "tool_result", "tool_use_id": "c2", "content": [{"type": "text", "text": "no result: interrupted"}], "is_error": True},
                {"type": "text", "text": "Go on."},
            ]},
        ])

    def test_openai_chat_tool_calls_with_json_arguments_one_tool_message_per_result(self) -> None:
        self.assertEqual(to_openai_chat(INPUT, "You are a coding agent."), [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "# Context Capsule\nGoal: fix auth"},
            {"role": "user", "content": [
                {"type": "text", "text": "Why does this fail?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ]},
            {"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": '{"command":"cargo test"}'}},
                {"id": "c2", "type": "function", "function": {"name": "Read", "arguments": '{"path":"log.txt"}'}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "1 failed"},
            {"role": "tool", "tool_call_id": "c2", "content": "no result: interrupted"},
            {"role": "system", "content": "The user switched branches."},
            {"role": "user", "content": "Go on."},
        ])

    def test_openai_chat_images_of_a_tool_result_follow_the_run_of_tool_messages(self) -> None:
        r = to_openai_chat([
            {"role": "assistant", "content": [
                {"type": "tool_call", "id": "c1", "name": "Screenshot", "input": {}},
                {"type": "tool_call", "id": "c2", "name": "Bash", "input": {}},
            ]},
            {"role": "tool", "toolCallId": "c1", "content": [
                {"type": "text", "text": "shot"}, {"type": "image", "media_type": "image/jpeg", "data": "AAAA"}]},
            {"role": "tool", "toolCallId": "c2", "content": [{"type": "text", "text": "ok"}]},
        ])
        self.assertEqual([m["role"] for m in r], ["assistant", "tool", "tool", "user"])
        self.assertEqual(r[3], {"role": "user", "content": [
            {"type": "text", "text": "Images from the result of tool call c1:"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
        ]})

    def test_openai_responses_instructions_function_call_and_output_items(self) -> None:
        r = to_openai_responses(INPUT, "You are a coding agent.")
        self.assertEqual(r["instructions"], "You are a coding agent.")
        self.assertEqual(r["input"], [
            {"role": "user", "content": [{"type": "input_text", "text": "# Context Capsule\nGoal: fix auth"}]},
            {"role": "user", "content": [
                {"type": "input_text", "text": "Why does this fail?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            ]},
            {"role": "assistant", "content": "Looking."},
            {"type": "function_call", "call_id": "c1", "name": "Bash", "arguments": '{"command":"cargo test"}'},
            {"type": "function_call", "call_id": "c2", "name": "Read", "arguments": '{"path":"log.txt"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "1 failed"},
            {"type": "function_call_output", "call_id": "c2", "output": "no result: interrupted"},
            {"role": "system", "content": "The user switched branches."},
            {"role": "user", "content": [{"type": "input_text", "text": "Go on."}]},
        ])

    def test_replies_come_back_as_entry_content_with_usage_in_disjoint_parts(self) -> None:
        self.assertEqual(from_anthropic({
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "Running it."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
            ],
            "usage": {"input_tokens": 12, "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 40, "output_tokens": 7},
        }), {
            "content": [
                {"type": "thinking", "thinking": "hmm"},
                {"type": "text", "text": "Running it."},
                {"type": "tool_call", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
            ],
            "usage": {"input": 12, "cacheRead": 3000, "cacheWrite": 40, "output": 7},
        })
        self.assertEqual(from_openai_chat({
            "choices": [{"message": {"content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "Read", "arguments": '{"path":"a.rs"}'}},
                {"id": "call_2", "type": "function", "function": {"name": "Bash", "arguments": "not json"}},
            ]}}],
            "usage": {"prompt_tokens": 5000, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 4096}},
        }), {
            "content": [
                {"type": "tool_call", "id": "call_1", "name": "Read", "input": {"path": "a.rs"}},
                {"type": "tool_call", "id": "call_2", "name": "Bash", "input": "not json"},
            ],
            "usage": {"input": 904, "cacheRead": 4096, "cacheWrite": 0, "output": 30},
        })
        self.assertEqual(from_openai_responses({
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Look at the test."}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Reading."}]},
                {"type": "function_call", "call_id": "call_9", "name": "Read", "arguments": '{"path":"t.rs"}'},
            ],
            "usage": {"input_tokens": 2000, "output_tokens": 15, "input_tokens_details": {"cached_tokens": 1024}},
        }), {
            "content": [
                {"type": "thinking", "thinking": "Look at the test."},
                {"type": "text", "text": "Reading."},
                {"type": "tool_call", "id": "call_9", "name": "Read", "input": {"path": "t.rs"}},
            ],
            "usage": {"input": 976, "cacheRead": 1024, "cacheWrite": 0, "output": 15},
        })
        self.assertEqual(from_openai_chat({"choices": [{"message": {"content": "hi"}}]}), {"content": [{"type": "text", "text": "hi"}]})


if __name__ == "__main__":
    unittest.main()
