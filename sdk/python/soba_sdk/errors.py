"""Errors a client sees: the daemon's JSON-RPC errors, and a connection that ends."""

from __future__ import annotations

from typing import Any, Optional


class ErrorCode:
    """The daemon's stable error codes (docs/protocol.md, "Errors")."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL = -32603
    #: The input cannot be brought under the hard limit; `data["compaction"]` says why. Send nothing.
    BUDGET_EXCEEDED = -32001
    #: No such session (or no active session in the workspace).
    UNKNOWN_SESSION = -32002
    #: The turn's one overflow retry is used; `data["compaction"]` says how it ended.
    OVERFLOW_RETRY_USED = -32003
    #: Another process writes the session log.
    SESSION_LOCKED = -32004


class SobaError(Exception):
    """An error answer from the daemon."""

    def __init__(self, method: str, code: int, message: str, data: Optional[Any] = None):
        super().__init__(f"{method}: {message}")
        self.method = method
        self.code = code
        self.data = data


class SobaConnectionError(Exception):
    """The connection ended (or could not start) before the answer came."""
