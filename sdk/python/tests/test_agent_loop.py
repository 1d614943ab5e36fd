"""The example agent loop, run against the real daemon with scripted models."""

from __future__ import annotations

import sys
import unittest
from pathlib import Path
from typing import Any, Callable, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from agent_loop import ContextOverflow, ModelReply, ToolOutput, run_agent, scripted_model  # noqa: E402

from soba_sdk import ErrorCode, SobaError  # noqa: E402
from soba_sdk.protocol import ModelMessage  # noqa: E402

from .support import DaemonTestCase, words  # noqa: E402


def reading_model(reads: int, after: Callable[[int], str]):
    """A model that reads `reads` chunks (about 3000 tokens each), then does what `after` says."""
    sizes: List[int] = []

    def model(messages: List[ModelMessage]) -> ModelReply:
        sizes.append(len(messages))
        n = len(sizes)
        if n <= reads:
            return ModelReply([{"type": "tool_call", "id": f"call_{n}", "name": "read_chunk", "input": {"n": n}}])
        if after(n) == "overflow":
            raise ContextOverflow("prompt is too long")
        return ModelReply([{"type": "text", "text": "done"}])

    return model, sizes


def read_chunk(i: Any) -> ToolOutput:
    return ToolOutput(words(i["n"]))


class AgentLoopTest(DaemonTestCase):
    def test_the_loop_sends_exactly_the_preflight_input_runs_the_tool_and_closes_the_session(self) -> None:
        ws = self.workspace("loop")
        (Path(ws) / "README.md").write_text("Auth service\nmore text\n")
        c = self.connect(ws)
        seen: List[List[ModelMessage]] = []

        def model(messages: List[ModelMessage]) -> ModelReply:
            seen.append(messages)
            return scripted_model(messages)

        run = run_agent(
            c,
            workspace=ws,
            task="What does the README say first?",
            system_prompt="Be brief.",
            call_model=model,
            tools={"read_file": lambda i: ToolOutput((Path(ws) / i["path"]).read_text())},
        )
        self.assertEqual(run.answer, "The README starts with: Auth service")
        self.assertEqual(run.steps, 2)
        self.assertEqual([[m["role"] for m in ms] for ms in seen], [["user"], ["user", "assistant", "tool"]])
        self.assertEqual(seen[1][2]["toolCallId"], seen[1][1]["content"][0]["id"])  # type: ignore[typeddict-item]
        self.assertEqual(c.sessions({"workspace": ws})["sessions"], [], "the run closed its session")

    def test_a_provider_overflow_gets_one_recovery_compaction_and_the_step_is_retried(self) -> None:
        ws = self.workspace("overflow")
        c = self.connect(ws)
        model, sizes = reading_model(2, lambda n: "overflow" if n == 3 else "answer")
        run = run_agent(c, workspace=ws, task="Read the chunks.", call_model=model, tools={"read_chunk": read_chunk})
        self.assertEqual(run.answer, "done")
        self.assertEqual([(r["trigger"], r["outcome"]) for r in run.compactions], [("context_overflow", "completed")])
        self.assertEqual(len(sizes), 4)
        self.assertLess(sizes[3], sizes[2], f"the retry sends the compacted input: {sizes}")

    def test_a_second_overflow_in_one_turn_stops_the_loop_with_overflow_retry_used(self) -> None:
        ws = self.workspace("overflow-twice")
        c = self.connect(ws)
        model, _ = reading_model(2, lambda n: "overflow")
        with self.assertRaises(SobaError) as caught:
            run_agent(c, workspace=ws, task="Read the chunks.", call_model=model, tools={"read_chunk": read_chunk})
        self.assertEqual(caught.exception.code, ErrorCode.OVERFLOW_RETRY_USED)
        self.assertEqual(c.sessions({"workspace": ws})["sessions"], [], "the session is closed all the same")

    def test_an_overflow_that_no_compaction_can_fix_stops_the_loop_with_the_reason(self) -> None:
        ws = self.workspace("overflow-small")
        c = self.connect(ws)
        # The task alone overflows: no history to summarize, no tool output to elide.
        model, _ = reading_model(0, lambda n: "overflow")
        with self.assertRaisesRegex(RuntimeError, r"^the input does not fit the model: "):
            run_agent(c, workspace=ws, task="Read the chunk.", call_model=model, tools={"read_chunk": read_chunk})

    def test_a_failing_tool_becomes_an_error_result_the_model_sees(self) -> None:
        ws = self.workspace("tool-fails")
        c = self.connect(ws)
        seen: List[List[ModelMessage]] = []

        def model(messages: List[ModelMessage]) -> ModelReply:
            seen.append(messages)
            return scripted_model(messages)

        def broken(_: Any) -> ToolOutput:
            raise FileNotFoundError("README.md: no such file")

        run = run_agent(c, workspace=ws, task="Read it.", call_model=model, tools={"read_file": broken})
        self.assertEqual(run.answer, "The README starts with: README.md: no such file")
        self.assertIs(seen[1][2]["isError"], True)


if __name__ == "__main__":
    unittest.main()
