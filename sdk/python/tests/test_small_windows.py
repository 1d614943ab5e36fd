"""The example agent loop in 16k and 32k windows on the defaults, with tool results of about 2.9k
tokens: the task finishes, compactions come at most once in three requests, every tool call the
model sees keeps its result, and the session log stays small."""

from __future__ import annotations

import glob
import json
import os
import sys
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from agent_loop import ModelReply, ToolOutput, run_agent  # noqa: E402

from soba_sdk import ErrorCode, SobaClient, SobaError  # noqa: E402
from soba_sdk.protocol import CompactionResult, ModelMessage, PreflightParams, PreflightResult  # noqa: E402

from .support import DaemonTestCase  # noqa: E402

# Enough reads that the history is several windows long: at 16k, ~16 × 2.9k is ~4.5 hard limits.
READS = 16
# The fewest requests between two compactions: a compaction leaves room for the next steps.
MIN_REQUESTS_BETWEEN_COMPACTIONS = 3


def tool_output(n: int) -> str:
    """About 2.9k tokens of distinct text (SOBA counts `w1234` as three tokens)."""
    return " ".join(f"w{(n * 7919 + w) % 9973}" for w in range(960))


class RecordingClient:
    """The client the loop drives, recording what each preflight sent and whether it compacted."""

    def __init__(self, client: SobaClient) -> None:
        self.client = client
        self.requests: List[Tuple[int, Optional[CompactionResult], List[ModelMessage]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def preflight(self, params: PreflightParams) -> PreflightResult:
        result = self.client.preflight(params)
        self.requests.append((result["tokens"], result["compaction"], result["messages"]))
        return result


def unpaired_tool_messages(messages: List[ModelMessage]) -> List[str]:
    """Tool calls without their result and results without their call, in one model input."""
    calls: Dict[str, int] = {}
    problems: List[str] = []
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            for b in m["content"]:
                if b["type"] == "tool_call":
                    calls[b["id"]] = i  # type: ignore[typeddict-item]
        elif m["role"] == "tool":
            call_id = m["toolCallId"]  # type: ignore[typeddict-item]
            if call_id not in calls:
                problems.append(f"result {call_id} without its call")
            else:
                del calls[call_id]
    problems.extend(f"call {c} without its result" for c in calls)
    return problems


class SmallWindowLoopTest(DaemonTestCase):
    def run_loop(self, window: int) -> None:
        ws = self.base / f"window-{window}"
        (ws / ".soba").mkdir(parents=True)
        # Only the window: every other figure is SOBA's default, scaled to the window.
        (ws / ".soba" / "config.json").write_text(json.dumps({"model": {"name": "gpt-4o", "contextWindow": window}}))
        workspace = str(ws.resolve())
        client = RecordingClient(self.connect(workspace))
        calls = 0

        def model(messages: List[ModelMessage]) -> ModelReply:
            nonlocal calls
            calls += 1
            if calls <= READS:
                return ModelReply([{"type": "tool_call", "id": f"call_{calls}", "name": "read_chunk", "input": {"n": calls}}])
            return ModelReply([{"type": "text", "text": f"read {calls - 1} chunks"}])

        run = run_agent(
            client,  # type: ignore[arg-type]
            workspace=workspace,
            task="Read every chunk, then say how many you read.",
            call_model=model,
            tools={"read_chunk": lambda i: ToolOutput(tool_output(i["n"]))},
            max_steps=READS + 1,
        )
        self.assertEqual(run.answer, f"read {READS} chunks", "the task finished")

        at = [i for i, (_, c, _) in enumerate(client.requests) if c is not None]
        compactions = [c for _, c, _ in client.requests if c is not None]
        self.assertGreaterEqual(len(compactions), 2, "the history is several windows long: the loop compacted")
        for c in compactions:
            self.assertEqual(c["outcome"], "completed", c["reason"])
        gaps = [b - a for a, b in zip(at, at[1:])]
        hard_limit = compactions[0]["hardLimit"]
        peak = max(tokens for tokens, _, _ in client.requests)
        figures = (f"window {window}: {len(client.requests)} inferences, {len(compactions)} compactions at requests "
                   f"{at}, peak input {peak} of hard limit {hard_limit} ({100 * peak / hard_limit:.0f}%)")
        print(f"\n   {figures}", file=sys.stderr)
        self.assertTrue(all(g >= MIN_REQUESTS_BETWEEN_COMPACTIONS for g in gaps), figures)
        self.assertLessEqual(peak, hard_limit, figures)
        for i, (_, _, messages) in enumerate(client.requests):
            self.assertEqual(unpaired_tool_messages(messages), [], f"request {i}")

        # The session log holds the loop's entries and one record per compaction; the loop's own
        # text is about 16 × 6 kB, so a log of capsule after capsule would stand out.
        logs = glob.glob(os.path.join(self.base, "data", "workspaces", "*", "sessions", "*.jsonl"))
        self.assertEqual(len(logs), 1, logs)
        with open(logs[0]) as f:
            records = [json.loads(line) for line in f if line.strip()]
        # A completed compaction is its capsule in the log (other outcomes a `compaction` record).
        logged = [r for r in records if r["type"] in ("capsule", "compaction")]
        self.assertEqual(len(logged), len(compactions), "the log records each compaction once")
        size = os.path.getsize(logs[0])
        self.assertLess(size, 400_000, f"the session log is {size} bytes")

    def test_a_loop_whose_steps_fill_the_room_at_once_is_stopped_by_the_storm_breaker(self) -> None:
        """Replies of ~4.5k tokens, nothing to elide, in a 16k window: every compaction fills up
        again at once. The breaker refuses the preflight with its reason and a flight record, and
        the loop has written a few capsules, not one per request."""
        ws = self.base / "storm"
        (ws / ".soba").mkdir(parents=True)
        (ws / ".soba" / "config.json").write_text(json.dumps({"model": {"name": "gpt-4o", "contextWindow": 16384}}))
        workspace = str(ws.resolve())
        c = self.connect(workspace)
        sid = c.open_session({"workspace": workspace})["sessionId"]
        c.append({"sessionId": sid, "entries": [
            {"type": "message", "role": "user", "content": [{"type": "text", "text": "Explain every module."}]}]})
        stopped: Optional[SobaError] = None
        for n in range(60):
            try:
                c.preflight({"sessionId": sid})
            except SobaError as e:
                stopped = e
                break
            c.append({"sessionId": sid, "entries": [{"type": "message", "role": "assistant", "content": [
                {"type": "text", "text": " ".join(f"w{(n * 7919 + w) % 9973}" for w in range(1500))}]}]})
        assert stopped is not None, "the breaker stopped the loop"
        self.assertEqual(stopped.code, ErrorCode.BUDGET_EXCEEDED)
        self.assertIn("compaction storm", str(stopped))
        records = c.flight({"sessionId": sid})["records"]
        # Oldest first: the refusal is the latest record.
        self.assertEqual(records[-1]["outcome"], "failed", records[-1])
        self.assertIn("compaction storm", records[-1]["reason"], records[-1])
        self.assertLessEqual(len([r for r in records if r["outcome"] == "completed"]), 4, records)

    def test_a_16k_window_on_the_defaults_finishes_the_task_with_room_between_compactions(self) -> None:
        self.run_loop(16384)

    def test_a_32k_window_on_the_defaults_finishes_the_task_with_room_between_compactions(self) -> None:
        self.run_loop(32768)


if __name__ == "__main__":
    unittest.main()
