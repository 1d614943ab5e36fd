"""A typed client for the SOBA daemon over JSON-RPC 2.0 with LSP framing: `soba serve` as a
child process (`SobaClient.spawn`) or any pair of byte streams (`SobaClient(reader, writer)`).

Requests block the calling thread until their answer; one reader thread dispatches answers
and notifications, so several threads may send requests at once."""

from __future__ import annotations

import collections
import itertools
import os
import subprocess
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Optional, Sequence
from urllib.parse import quote

from . import protocol as p
from .errors import ErrorCode, SobaConnectionError, SobaError
from .framing import FramingError, encode_frame, read_frame

STDERR_TAIL_BYTES = 4096


class SobaClient:
    def __init__(
        self,
        reader: BinaryIO,
        writer: BinaryIO,
        *,
        process: Optional[subprocess.Popen] = None,
        workspace_folders: Sequence[str] = (),
        work_done_progress: bool = False,
        client_name: str = "soba-sdk",
    ):
        """Connect over streams you opened yourself and send `initialize`."""
        self._reader = reader
        self._writer = writer
        self._process = process
        self._ids = itertools.count(1)
        self._pending: Dict[int, tuple[str, Future]] = {}
        self._handlers: Dict[str, list[Callable[[Any], None]]] = collections.defaultdict(list)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._closed_reason: Optional[str] = None
        self._stderr_tail = b""
        self._threads = [threading.Thread(target=self._read_loop, name="soba-reader", daemon=True)]
        if process is not None and process.stderr is not None:
            self._threads.append(threading.Thread(target=self._drain_stderr, name="soba-stderr", daemon=True))
        for t in self._threads:
            t.start()
        folders = [{"uri": "file://" + quote(str(f)), "name": Path(f).name or str(f)} for f in workspace_folders]
        self.initialize_result: Dict[str, Any] = self._send(
            "initialize",
            {
                "processId": os.getpid(),
                "clientInfo": {"name": client_name},
                "rootUri": None,
                "capabilities": {"window": {"workDoneProgress": work_done_progress}},
                "workspaceFolders": folders,
            },
        )
        self.server_info: Optional[Dict[str, Any]] = self.initialize_result.get("serverInfo")
        self._write({"jsonrpc": "2.0", "method": "initialized", "params": {}})

    @classmethod
    def spawn(
        cls,
        *,
        bin: Optional[str] = None,
        args: Sequence[str] = (),
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        workspace_folders: Sequence[str] = (),
        work_done_progress: bool = False,
    ) -> "SobaClient":
        """Start `soba serve` (`bin`, else `$SOBA_BIN`, else `soba` on PATH) and initialize."""
        exe = bin or os.environ.get("SOBA_BIN") or "soba"
        try:
            process = subprocess.Popen(
                [exe, "serve", *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
            )
        except OSError as e:
            raise SobaConnectionError(f"cannot run {exe}: {e.strerror or e}; set SOBA_BIN or pass bin=") from e
        try:
            return cls(
                process.stdout,
                process.stdin,
                process=process,
                workspace_folders=workspace_folders,
                work_done_progress=work_done_progress,
            )
        except BaseException:
            process.kill()
            process.wait()
            raise

    # Generic ------------------------------------------------------------------------------

    def request(self, method: str, params: Any, timeout: Optional[float] = None) -> Any:
        """Any request by name; blocks until the answer (or `timeout` seconds)."""
        return self._send(method, params, timeout)

    def on(self, method: str, handler: Callable[[Any], None]) -> Callable[[], None]:
        """Call `handler(params)` for each notification `method` (on the reader thread, so a
        handler must not send requests itself); returns a function that stops it."""
        with self._lock:
            self._handlers[method].append(handler)

        def off() -> None:
            with self._lock:
                if handler in self._handlers[method]:
                    self._handlers[method].remove(handler)

        return off

    # Agent side ---------------------------------------------------------------------------

    def open_session(self, params: p.SessionOpenParams) -> p.SessionOpenResult:
        return self._send("soba/session/open", params)

    def append(self, params: p.SessionAppendParams) -> p.SessionAppendResult:
        return self._send("soba/session/append", params)

    def preflight(self, params: p.PreflightParams) -> p.PreflightResult:
        """Call immediately before every inference and send exactly `messages`."""
        return self._send("soba/preflight", params)

    def turn_complete(self, params: p.TurnCompleteParams) -> p.TurnCompleteResult:
        return self._send("soba/turn/complete", params)

    def checkpoint(self, params: p.CheckpointParams) -> p.CheckpointResult:
        return self._send("soba/checkpoint", params)

    def overflow(self, params: p.OverflowParams) -> p.OverflowResult:
        """The provider rejected the request as too long: one recovery compaction per turn."""
        return self._send("soba/overflow", params)

    def cancel(self, params: p.CancelParams) -> p.CancelResult:
        return self._send("soba/cancel", params)

    def rewind(self, params: p.RewindParams) -> p.RewindResult:
        return self._send("soba/rewind", params)

    def close_session(self, params: p.SessionCloseParams) -> p.SessionCloseResult:
        return self._send("soba/session/close", params)

    # Editor side --------------------------------------------------------------------------

    def budget(self, params: Optional[p.BudgetParams] = None) -> p.BudgetResult:
        return self._send("soba/budget", params or {})

    def context(self, params: Optional[p.ContextParams] = None) -> p.ContextResult:
        """What fills the context window: by part, by kind, the largest entries, the capsule."""
        return self._send("soba/context", params or {})

    def compact(self, params: Optional[p.CompactParams] = None) -> p.CompactResult:
        return self._send("soba/compact", params or {})

    def auto_compact(self, params: p.AutoCompactParams) -> p.AutoCompactResult:
        return self._send("soba/autoCompact", params)

    def sessions(self, params: Optional[p.SessionsParams] = None) -> p.SessionsResult:
        return self._send("soba/sessions", params or {})

    def flight(self, params: Optional[p.FlightParams] = None) -> p.FlightResult:
        return self._send("soba/flight", params or {})

    def capsule_create(self, params: p.CapsuleCreateParams) -> p.CapsuleCreateResult:
        return self._send("soba/capsule/create", params)

    def capsule_export(self, params: p.CapsuleExportParams) -> p.CapsuleExportResult:
        return self._send("soba/capsule/export", params)

    def capsule_load(self, params: p.CapsuleLoadParams) -> p.CapsuleLoadResult:
        return self._send("soba/capsule/load", params)

    def capsule_list(self, params: Optional[p.CapsuleListParams] = None) -> p.CapsuleListResult:
        return self._send("soba/capsule/list", params or {})

    def attach(self, params: p.AttachParams) -> p.AttachResult:
        """Follow a live agent transcript (Claude Code, Codex, pi) into a session."""
        return self._send("soba/attach", params)

    def preview(self, params: p.PreviewParams) -> p.PreviewResult:
        """What SOBA would send after a compact, capsule load or rewind, changing nothing."""
        return self._send("soba/preview", params)

    # Lifetime -----------------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """`shutdown` and `exit`; waits for a spawned `soba serve` to end."""
        if self._closed_reason is None:
            try:
                self._send("shutdown", None, timeout)
                self._write({"jsonrpc": "2.0", "method": "exit"})
            except (SobaConnectionError, SobaError, TimeoutError, OSError):
                pass  # Already gone: nothing left to shut down.
        try:
            self._writer.close()
        except OSError:
            pass
        if self._process is not None:
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            for t in self._threads:
                t.join(timeout)
            for stream in (self._process.stdout, self._process.stderr):
                if stream is not None:
                    stream.close()
        self._fail("the client closed the connection")

    def __enter__(self) -> "SobaClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # Internals ----------------------------------------------------------------------------

    def _send(self, method: str, params: Any, timeout: Optional[float] = None) -> Any:
        if threading.current_thread() is self._threads[0]:
            # The answer would arrive on this very thread: waiting for it would hang forever.
            raise RuntimeError(
                f"{method}: requests cannot be sent from a notification handler; "
                "hand the work to another thread (a queue, an executor)"
            )
        future: Future = Future()
        with self._lock:
            if self._closed_reason is not None:
                raise SobaConnectionError(f"{method}: {self._closed_reason}")
            msg_id = next(self._ids)
            self._pending[msg_id] = (method, future)
        try:
            self._write({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        except OSError as e:
            self._fail(f"writing to the daemon failed: {e}")
        try:
            return future.result(timeout)
        except TimeoutError:
            with self._lock:
                self._pending.pop(msg_id, None)
            raise TimeoutError(f"{method}: no answer within {timeout}s") from None

    def _write(self, message: Any) -> None:
        frame = encode_frame(message)
        with self._write_lock:
            self._writer.write(frame)
            self._writer.flush()

    def _read_loop(self) -> None:
        reason = "the daemon closed the connection"
        try:
            while True:
                msg = read_frame(self._reader)
                if msg is None:
                    break
                self._dispatch(msg)
        except FramingError as e:
            reason = f"unreadable data from the daemon: {e}"
        except (OSError, ValueError) as e:
            reason = f"reading from the daemon failed: {e}"
        if self._process is not None:
            try:
                code = self._process.wait(1.0)
                reason = f"soba serve exited ({f'signal {-code}' if code < 0 else f'code {code}'})"
            except subprocess.TimeoutExpired:
                pass
        self._fail(reason)

    def _drain_stderr(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        for chunk in iter(lambda: self._process.stderr.read1(4096), b""):  # type: ignore[union-attr]
            self._stderr_tail = (self._stderr_tail + chunk)[-STDERR_TAIL_BYTES:]

    def _dispatch(self, msg: Dict[str, Any]) -> None:
        method = msg.get("method")
        if not isinstance(method, str):
            with self._lock:
                entry = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
            if entry is None:
                return
            name, future = entry
            error = msg.get("error")
            if error is not None:
                future.set_exception(SobaError(name, error.get("code", 0), error.get("message", ""), error.get("data")))
            else:
                future.set_result(msg.get("result"))
            return
        if "id" in msg:
            # A request from the daemon: progress tokens are accepted, anything else is not served here.
            if method == "window/workDoneProgress/create":
                self._write({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            else:
                self._write({
                    "jsonrpc": "2.0",
                    "id": msg["id"],
                    "error": {"code": ErrorCode.METHOD_NOT_FOUND, "message": f"the client does not handle {method}"},
                })
            return
        with self._lock:
            handlers = list(self._handlers.get(method, ()))
        for handler in handlers:
            handler(msg.get("params"))

    def _fail(self, reason: str) -> None:
        with self._lock:
            if self._closed_reason is not None:
                return
            stderr = self._stderr_tail.decode("utf-8", "replace").strip()
            self._closed_reason = f"{reason}; its stderr ends with: {stderr}" if stderr else reason
            pending, self._pending = self._pending, {}
        for name, future in pending.values():
            future.set_exception(SobaConnectionError(f"{name}: {self._closed_reason} before answering"))
