"""A whole agent session against the real daemon, through the typed client."""

from __future__ import annotations

import signal
import unittest
from pathlib import Path
from typing import Any, List

from soba_sdk import ErrorCode, SobaClient, SobaConnectionError, SobaError, protocol
from soba_sdk.protocol import AppendedEntry

from .support import BIN, DaemonTestCase, until, words


def text(role: str, t: str) -> AppendedEntry:
    return {"type": "message", "role": role, "content": [{"type": "text", "text": t}]}  # type: ignore[typeddict-item]


class SessionTest(DaemonTestCase):
    def test_open_append_preflight_compaction_capsule_create_and_export(self) -> None:
        ws = self.workspace("full")
        c = self.connect(ws)
        self.assertEqual(c.server_info and c.server_info["name"], "soba")
        compaction: List[Any] = []
        closed: List[Any] = []
        c.on("soba/compaction", compaction.append)
        c.on("soba/session/closed", closed.append)

        opened = c.open_session({"workspace": ws, "model": {"name": "gpt-4o"}})
        self.assertRegex(opened["sessionId"], r"^s_")
        self.assertEqual(opened["budget"]["hardLimit"], 9808)
        sid = opened["sessionId"]

        appended = c.append({"sessionId": sid, "entries": [
            {"type": "setting", "systemPrompt": "You are a careful coding agent."},
            text("user", "Fix the failing auth test"),
            {"type": "message", "role": "assistant", "content": [
                {"type": "text", "text": "Running the tests."},
                {"type": "tool_call", "id": "call_1", "name": "Bash", "input": {"command": "cargo test"}},
            ], "usage": {"input": 900, "cacheRead": 0, "cacheWrite": 0, "output": 40}},
            {"type": "tool_result", "callId": "call_1", "toolName": "Bash",
             "content": [{"type": "text", "text": "1 failed"}], "isError": True},
        ]})
        self.assertEqual(len(appended["entryIds"]), 4)
        self.assertEqual(appended["leafId"], appended["entryIds"][3])
        self.assertEqual(appended["budget"]["source"], "provider_usage")

        first = c.preflight({"sessionId": sid})
        self.assertIsNone(first["compaction"])
        # The setting is not a message: the agent sends its system prompt itself.
        self.assertEqual([m["role"] for m in first["messages"]], ["user", "assistant", "tool"])
        self.assertEqual(first["messages"][2]["toolCallId"], "call_1")
        self.assertIs(first["messages"][2]["isError"], True)
        self.assertEqual(first["messages"][1]["entryId"], appended["entryIds"][2])

        # compactOnTurnComplete is on by default: a soft intent for the next preflight.
        done = c.turn_complete({"sessionId": sid, "usage": {"input": 950, "cacheRead": 0, "cacheWrite": 0, "output": 60}})
        self.assertEqual(done, {"intentRecorded": True})

        big = c.append({"sessionId": sid, "entries": [text("assistant" if i % 2 else "user", words(i)) for i in range(4)]})
        self.assertGreater(big["budget"]["effectiveTokens"], big["budget"]["hardLimit"])

        model_input = c.preflight({"sessionId": sid})
        result = model_input["compaction"]
        assert result is not None
        self.assertEqual(result["outcome"], "completed")
        self.assertEqual(result["trigger"], "hard_limit")
        self.assertLessEqual(model_input["tokens"], big["budget"]["hardLimit"])
        capsule = model_input["messages"][0]
        self.assertEqual(capsule["role"], "user")
        self.assertNotIn("entryId", capsule, "the capsule message comes from no entry")
        self.assertRegex(capsule["content"][0]["text"], r"(?i)capsule")  # type: ignore[typeddict-item]
        until(lambda: any(n["phase"] == "end" for n in compaction))
        self.assertEqual(compaction[0]["phase"], "start")
        self.assertRegex(next(n for n in compaction if n["phase"] == "end")["message"], r"^hard_limit compact: ")

        budget = c.budget({"sessionId": sid})
        self.assertEqual(budget["lastCompaction"]["checkpointId"], result["checkpointId"])  # type: ignore[index]

        created = c.capsule_create({"sessionId": sid, "title": "auth fix hand-off"})
        self.assertRegex(created["checkpointId"], r"^ck_")
        listed = c.capsule_list({"sessionId": sid})
        self.assertEqual([k["trigger"] for k in listed["capsules"]], ["hard_limit", "handoff"])
        file = str(self.base / "handoff.capsule.md")
        self.assertEqual(c.capsule_export({"sessionId": sid, "checkpointId": created["checkpointId"], "path": file}), {"path": file})
        self.assertIn("auth fix hand-off", Path(file).read_text())

        flight = c.flight({"sessionId": sid})
        self.assertEqual(flight["records"][0]["operationId"], result["operationId"])
        self.assertEqual(c.sessions({"workspace": ws})["sessions"][0]["sessionId"], sid)

        self.assertEqual(c.close_session({"sessionId": sid}), {"sessionId": sid, "path": opened["path"]})
        until(lambda: len(closed) == 1)
        self.assertEqual(closed[0], {"sessionId": sid, "workspace": ws, "reason": "closed"})

    def test_daemon_errors_arrive_as_soba_error_with_the_stable_code_and_data(self) -> None:
        ws = self.workspace("errors")
        c = self.connect(ws)
        with self.assertRaises(SobaError) as caught:
            c.preflight({"sessionId": "s_nope"})
        self.assertEqual(caught.exception.code, ErrorCode.UNKNOWN_SESSION)
        self.assertEqual(caught.exception.method, "soba/preflight")
        self.assertIn("soba/session/open", str(caught.exception))

        sid = c.open_session({"workspace": ws})["sessionId"]
        with self.assertRaises(SobaError) as caught:
            c.request("soba/session/append", {"sessionId": sid, "entries": [{"type": "capsule"}]})
        self.assertEqual(caught.exception.code, ErrorCode.INVALID_PARAMS)
        self.assertIn("written by the daemon", str(caught.exception))

        c.append({"sessionId": sid, "entries": [text("user", words(1)), text("assistant", words(2))]})
        self.assertEqual(c.overflow({"sessionId": sid})["compaction"]["trigger"], "context_overflow")
        with self.assertRaises(SobaError) as caught:
            c.overflow({"sessionId": sid})
        self.assertEqual(caught.exception.code, ErrorCode.OVERFLOW_RETRY_USED)
        self.assertEqual(caught.exception.data["compaction"]["trigger"], "context_overflow")

    def test_session_settings_layer_over_the_config_for_that_session_only(self) -> None:
        ws = self.workspace("settings")
        c = self.connect(ws)
        tuned = c.open_session({"workspace": ws, "compaction": {"safetyReserveTokens": 1000, "auto": False}})
        plain = c.open_session({"workspace": ws})
        self.assertEqual(tuned["budget"]["hardLimit"], 17000)
        self.assertEqual(plain["budget"]["hardLimit"], 9808)
        self.assertIs(c.budget({"sessionId": tuned["sessionId"]})["autoCompact"], False)
        with self.assertRaises(SobaError) as caught:
            c.open_session({"workspace": ws, "compaction": {"keepRecentTokens": "lots"}})  # type: ignore[typeddict-item]
        self.assertEqual(caught.exception.code, ErrorCode.INVALID_PARAMS)
        self.assertIn("compaction.keepRecentTokens", str(caught.exception))

    def test_every_method_has_a_typed_wrapper_on_the_client(self) -> None:
        wrappers = {
            "soba/session/open": "open_session",
            "soba/session/append": "append",
            "soba/preflight": "preflight",
            "soba/turn/complete": "turn_complete",
            "soba/checkpoint": "checkpoint",
            "soba/overflow": "overflow",
            "soba/cancel": "cancel",
            "soba/rewind": "rewind",
            "soba/session/close": "close_session",
            "soba/budget": "budget",
            "soba/context": "context",
            "soba/attach": "attach",
            "soba/compact": "compact",
            "soba/autoCompact": "auto_compact",
            "soba/sessions": "sessions",
            "soba/flight": "flight",
            "soba/capsule/create": "capsule_create",
            "soba/capsule/export": "capsule_export",
            "soba/capsule/load": "capsule_load",
            "soba/capsule/list": "capsule_list",
            "soba/preview": "preview",
        }
        self.assertEqual(sorted(wrappers), sorted(protocol.METHODS))
        for method, name in wrappers.items():
            hints = getattr(SobaClient, name).__annotations__
            params_type, result_type = protocol.METHODS[method]
            # A tagged union (soba/preview) is an alias: its name is the module's, not its own.
            params_name = next(k for k, v in vars(protocol).items() if v is params_type)
            self.assertIn(params_name, str(hints.get("params")), name)
            self.assertEqual(hints["return"], f"p.{result_type.__name__}", name)
        ws = self.workspace("wrappers")
        c = self.connect(ws)
        offered = [
            "soba/" + cmd.removeprefix("soba.server.").replace(".", "/")
            for cmd in c.initialize_result["capabilities"]["executeCommandProvider"]["commands"]
        ]
        self.assertEqual(sorted(offered), sorted(protocol.METHODS), "the daemon serves exactly the generated methods")

    def test_a_daemon_that_goes_away_fails_later_requests_with_soba_connection_error(self) -> None:
        ws = self.workspace("gone")
        c = self.connect(ws, args=["--standalone"])
        sid = c.open_session({"workspace": ws})["sessionId"]
        process = c._process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait()
        until(lambda: c._closed_reason is not None)
        with self.assertRaises(SobaConnectionError) as caught:
            c.budget({"sessionId": sid})
        self.assertRegex(str(caught.exception), r"^soba/budget: soba serve exited \(signal 9\)")

    def test_a_missing_binary_is_a_clear_soba_connection_error(self) -> None:
        with self.assertRaises(SobaConnectionError) as caught:
            SobaClient.spawn(bin=str(self.base / "no-such-soba"), env=self.env)
        self.assertRegex(str(caught.exception), r"cannot run .*no-such-soba: No such file or directory; set SOBA_BIN")
        self.assertTrue(Path(BIN).exists(), f"the tests drive {BIN}")


if __name__ == "__main__":
    unittest.main()
