"""Typed client for the SOBA daemon (`soba serve`): sessions, the preflight barrier,
compaction and Context Capsules over JSON-RPC. Standard library only."""

from . import protocol
from .client import SobaClient
from .errors import ErrorCode, SobaConnectionError, SobaError
from .framing import FramingError, encode_frame, read_frame
from .providers import (
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    image_url,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)

__all__ = [
    "ErrorCode",
    "FramingError",
    "SobaClient",
    "SobaConnectionError",
    "SobaError",
    "encode_frame",
    "from_anthropic",
    "from_openai_chat",
    "from_openai_responses",
    "image_url",
    "protocol",
    "read_frame",
    "to_anthropic",
    "to_openai_chat",
    "to_openai_responses",
]
