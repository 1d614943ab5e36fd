"""Framing and the client's connection handling, over in-memory pipes."""

from __future__ import annotations

import io
import os
import threading
import unittest
from typing import Any, Callable, Dict, List

from soba_sdk import FramingError, SobaClient, SobaConnectionError, encode_frame, read_frame


class FramingTest(unittest.TestCase):
    def test_several_frames_and_multibyte_text_are_read_whole(self) -> None:
        stream = io.BytesIO(encode_frame({"id": 1, "result": {"text": "é€😀"}}) + encode_frame({"method": "m", "params": {}}))
        self.assertEqual(read_frame(stream), {"id": 1, "result": {"text": "é€😀"}})
        self.assertEqual(read_frame(stream), {"method": "m", "params": {}})
        self.assertIsNone(read_frame(stream))

    def test_header_names_are_read_in_any_case_next_to_other_headers(self) -> None:
        body = b'{"id":1}'
        stream = io.BytesIO(b"content-length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" % len(body) + body)
        self.assertEqual(read_frame(stream), {"id": 1})

    def test_a_header_without_content_length_is_a_framing_error(self) -> None:
        with self.assertRaisesRegex(FramingError, "without a valid Content-Length"):
            read_frame(io.BytesIO(b"X-Nope: 1\r\n\r\n{}"))

    def test_a_stream_that_ends_inside_a_body_is_a_framing_error(self) -> None:
        with self.assertRaisesRegex(FramingError, "ended 8 bytes into a 10-byte frame"):
            read_frame(io.BytesIO(b"Content-Length: 10\r\n\r\n{}"))


class FakeDaemon:
    """Answers `initialize`, then does what `script` says with each message from the client."""

    def __init__(self, script: Callable[[Dict[str, Any], "FakeDaemon"], None]):
        to_client_r, self._to_client_w = os.pipe()
        self._from_client_r, from_client_w = os.pipe()
        self.client_reader = os.fdopen(to_client_r, "rb")
        self.client_writer = os.fdopen(from_client_w, "wb")
        self.out = os.fdopen(self._to_client_w, "wb")
        self.script = script
        threading.Thread(target=self._run, daemon=True).start()

    def reply(self, message: Any) -> None:
        self.out.write(encode_frame(message))
        self.out.flush()

    def end(self) -> None:
        if not self.out.closed:
            self.out.close()

    def close(self, client: SobaClient) -> None:
        self.end()
        client.close()
        self.client_reader.close()

    def _run(self) -> None:
        with os.fdopen(self._from_client_r, "rb") as inp:
            while (msg := read_frame(inp)) is not None:
                if msg.get("method") == "initialize":
                    self.reply({"jsonrpc": "2.0", "id": msg["id"], "result": {"capabilities": {}, "serverInfo": {"name": "soba"}}})
                elif not self.out.closed:
                    self.script(msg, self)


class ConnectionTest(unittest.TestCase):
    def test_a_request_pending_when_the_connection_ends_is_rejected_and_so_is_every_later_one(self) -> None:
        def script(msg: Dict[str, Any], d: FakeDaemon) -> None:
            if msg.get("method") == "soba/preflight":
                d.end()

        d = FakeDaemon(script)
        c = SobaClient(d.client_reader, d.client_writer)
        with self.assertRaises(SobaConnectionError) as caught:
            c.preflight({"sessionId": "s_1"})
        self.assertEqual(str(caught.exception), "soba/preflight: the daemon closed the connection before answering")
        with self.assertRaisesRegex(SobaConnectionError, r"^soba/budget: the daemon closed the connection$"):
            c.budget()
        d.close(c)

    def test_server_requests_are_answered_progress_tokens_accepted_others_refused(self) -> None:
        answers: List[Any] = []

        def script(msg: Dict[str, Any], d: FakeDaemon) -> None:
            if msg.get("method") == "soba/budget":
                d.reply({"jsonrpc": "2.0", "id": 100, "method": "window/workDoneProgress/create", "params": {"token": "t"}})
                d.reply({"jsonrpc": "2.0", "id": 101, "method": "workspace/configuration", "params": {}})
                self._budget_id = msg["id"]
            elif msg.get("id") in (100, 101):
                answers.append(msg)
                if len(answers) == 2:
                    d.reply({"jsonrpc": "2.0", "id": self._budget_id, "result": {"ok": True}})

        d = FakeDaemon(script)
        c = SobaClient(d.client_reader, d.client_writer)
        self.assertEqual(c.budget(), {"ok": True})
        self.assertEqual(answers, [
            {"jsonrpc": "2.0", "id": 100, "result": None},
            {"jsonrpc": "2.0", "id": 101, "error": {"code": -32601, "message": "the client does not handle workspace/configuration"}},
        ])
        d.close(c)

    def test_unreadable_bytes_from_the_daemon_end_the_connection_with_a_clear_error(self) -> None:
        def script(msg: Dict[str, Any], d: FakeDaemon) -> None:
            if msg.get("method") == "soba/budget":
                d.out.write(b"garbage\r\n\r\n")
                d.out.flush()

        d = FakeDaemon(script)
        c = SobaClient(d.client_reader, d.client_writer)
        with self.assertRaisesRegex(SobaConnectionError, "unreadable data from the daemon: frame header without a valid Content-Length"):
            c.budget()
        d.close(c)

    def test_a_request_without_an_answer_times_out_and_the_connection_goes_on(self) -> None:
        def script(msg: Dict[str, Any], d: FakeDaemon) -> None:
            if msg.get("method") == "soba/sessions":
                d.reply({"jsonrpc": "2.0", "id": msg["id"], "result": {"sessions": []}})

        d = FakeDaemon(script)
        c = SobaClient(d.client_reader, d.client_writer)
        with self.assertRaisesRegex(TimeoutError, r"^soba/budget: no answer within 0.2s$"):
            c.request("soba/budget", {}, timeout=0.2)
        self.assertEqual(c.sessions(), {"sessions": []})
        d.close(c)

    def test_a_request_from_a_notification_handler_is_refused_instead_of_hanging(self) -> None:
        def script(msg: Dict[str, Any], d: FakeDaemon) -> None:
            if msg.get("method") == "soba/sessions":
                d.reply({"jsonrpc": "2.0", "method": "soba/budgetChanged", "params": {"sessionId": "s_1"}})
                d.reply({"jsonrpc": "2.0", "id": msg["id"], "result": {"sessions": []}})

        d = FakeDaemon(script)
        c = SobaClient(d.client_reader, d.client_writer)
        refused: List[BaseException] = []

        def handler(_: Any) -> None:
            try:
                c.budget()
            except RuntimeError as e:
                refused.append(e)

        c.on("soba/budgetChanged", handler)
        self.assertEqual(c.sessions(), {"sessions": []})
        self.assertEqual(len(refused), 1)
        self.assertIn("requests cannot be sent from a notification handler", str(refused[0]))
        d.close(c)


if __name__ == "__main__":
    unittest.main()
