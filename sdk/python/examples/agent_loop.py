"""An agent loop over SOBA. The model sees exactly what `soba/preflight` returns, every step:

    open → append the task → [ preflight → model → append reply → run tools → append results ]*
         → turn/complete → close

`call_model` is where a provider request goes (see soba_sdk.to_anthropic / to_openai_chat /
to_openai_responses). Run this file to see the loop with a scripted stand-in model:

    python3 examples/agent_loop.py /path/to/workspace
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from soba_sdk import ErrorCode, SobaClient, SobaError  # noqa: E402
from soba_sdk.protocol import AppendedEntry, CompactionResult, ContentBlock, ModelMessage, Usage  # noqa: E402


@dataclass
class ModelReply:
    content: List[ContentBlock]
    # The provider's usage of this inference, when it reports one: it anchors SOBA's budget to
    # the real count. Never send made-up numbers; an input of 0 would hide the whole history.
    usage: Optional[Usage] = None


class ContextOverflow(Exception):
    """Raised by `call_model` when the provider rejects the input as too long."""


@dataclass
class ToolOutput:
    output: str
    is_error: bool = False


@dataclass
class AgentRun:
    session_id: str
    answer: str
    steps: int
    compactions: List[CompactionResult] = field(default_factory=list)


def run_agent(
    client: SobaClient,
    *,
    workspace: str,
    task: str,
    call_model: Callable[[List[ModelMessage]], ModelReply],
    tools: Dict[str, Callable[[Any], ToolOutput]],
    system_prompt: Optional[str] = None,
    max_steps: int = 20,
) -> AgentRun:
    session_id = client.open_session({"workspace": workspace})["sessionId"]
    compactions: List[CompactionResult] = []
    try:
        first: List[AppendedEntry] = []
        if system_prompt:
            first.append({"type": "setting", "systemPrompt": system_prompt})
        first.append({"type": "message", "role": "user", "content": [{"type": "text", "text": task}]})
        client.append({"sessionId": session_id, "entries": first})

        step = 0
        while step < max_steps:
            step += 1
            # BUDGET_EXCEEDED propagates: the input cannot fit, and nothing may be sent.
            model_input = client.preflight({"sessionId": session_id})
            if model_input["compaction"]:
                compactions.append(model_input["compaction"])
            try:
                reply = call_model(model_input["messages"])
            except ContextOverflow:
                # One recovery compaction per turn; a second overflow raises OVERFLOW_RETRY_USED.
                recovered = client.overflow({"sessionId": session_id})
                compactions.append(recovered["compaction"])
                if not recovered["retryAllowed"]:
                    raise RuntimeError(f"the input does not fit the model: {recovered['compaction']['reason']}")
                step -= 1
                continue
            client.append({"sessionId": session_id, "entries": [
                {"type": "message", "role": "assistant", "content": reply.content, "usage": reply.usage},
            ]})
            calls = [b for b in reply.content if b["type"] == "tool_call"]
            if not calls:
                client.turn_complete({"sessionId": session_id, "usage": reply.usage})
                answer = "".join(b["text"] for b in reply.content if b["type"] == "text")  # type: ignore[typeddict-item]
                return AgentRun(session_id, answer, step, compactions)
            results: List[AppendedEntry] = []
            for call in calls:
                tool = tools.get(call["name"])  # type: ignore[typeddict-item]
                try:
                    out = tool(call["input"]) if tool else ToolOutput(f"unknown tool {call['name']}", True)  # type: ignore[typeddict-item]
                except Exception as e:  # A failing tool is a result the model should see.
                    out = ToolOutput(str(e), True)
                results.append({
                    "type": "tool_result",
                    "callId": call["id"],  # type: ignore[typeddict-item]
                    "toolName": call["name"],  # type: ignore[typeddict-item]
                    "content": [{"type": "text", "text": out.output}],
                    "isError": out.is_error,
                })
            client.append({"sessionId": session_id, "entries": results})
        raise RuntimeError(f"no answer within {max_steps} steps")
    finally:
        try:
            client.close_session({"sessionId": session_id})
        except SobaError as e:
            # The session is already gone when the daemon went away; there is nothing to release.
            if e.code != ErrorCode.UNKNOWN_SESSION:
                raise


def scripted_model(messages: List[ModelMessage]) -> ModelReply:
    """A stand-in model: reads README.md with the tool, then answers with its first line."""
    last = messages[-1]
    if last["role"] != "tool":
        return ModelReply([{"type": "tool_call", "id": f"call_{len(messages)}", "name": "read_file", "input": {"path": "README.md"}}])
    text = "".join(b["text"] for b in last["content"] if b["type"] == "text")  # type: ignore[typeddict-item]
    return ModelReply([{"type": "text", "text": f"The README starts with: {text.splitlines()[0] if text else ''}"}])


def main() -> None:
    workspace = str(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())
    with SobaClient.spawn(workspace_folders=[workspace]) as client:
        client.on("soba/compaction", lambda n: n["phase"] == "end" and print(n["message"]))
        run = run_agent(
            client,
            workspace=workspace,
            task="What does the README say first?",
            call_model=scripted_model,
            tools={"read_file": lambda i: ToolOutput((Path(workspace) / i["path"]).read_text())},
        )
        print(f"{run.answer}\n({run.steps} steps, session {run.session_id})")


if __name__ == "__main__":
    main()
