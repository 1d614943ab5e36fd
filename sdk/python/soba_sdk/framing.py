"""LSP base-protocol framing: `Content-Length: N\\r\\n\\r\\n` followed by N bytes of UTF-8 JSON."""

from __future__ import annotations

import json
from typing import Any, BinaryIO, Optional


class FramingError(Exception):
    """A frame that cannot be read; the stream cannot be followed after it."""


def encode_frame(message: Any) -> bytes:
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def read_frame(stream: BinaryIO) -> Optional[Any]:
    """The next message, or None at the end of the stream."""
    length = None
    saw_header = False
    while True:
        line = stream.readline()
        if not line:
            if saw_header:
                raise FramingError("the stream ended inside a frame header")
            return None
        if line in (b"\r\n", b"\n"):
            if not saw_header:
                continue
            break
        saw_header = True
        name, sep, value = line.decode("ascii", "replace").partition(":")
        if sep and name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise FramingError(f"invalid Content-Length: {value.strip()!r}") from None
    if length is None or length < 0:
        raise FramingError("frame header without a valid Content-Length")
    body = b""
    while len(body) < length:
        chunk = stream.read(length - len(body))
        if not chunk:
            raise FramingError(f"the stream ended {length - len(body)} bytes into a {length}-byte frame")
        body += chunk
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FramingError(f"frame body is not UTF-8 JSON: {e}") from None
