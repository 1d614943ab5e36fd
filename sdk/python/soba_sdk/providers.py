"""The model input from `soba/preflight` in the request shapes of common provider APIs.
Pure functions: the caller adds model, tools and sampling settings.

Thinking blocks are left out everywhere: providers accept earlier reasoning only with the
signature or encrypted content they issued, which the plain `thinking` block does not carry."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Sequence

from .protocol import ContentBlock, ModelMessage


def _text_of(blocks: Sequence[ContentBlock]) -> str:
    return "\n".join(b["text"] for b in blocks if b["type"] == "text")  # type: ignore[typeddict-item]


def _images_of(blocks: Sequence[ContentBlock]) -> List[Dict[str, Any]]:
    return [b for b in blocks if b["type"] == "image" and b.get("data")]  # type: ignore[misc]


def image_url(image: Dict[str, Any]) -> str:
    """`data:` URL (or the URL itself when the block holds one) of an image block."""
    data = image.get("data") or ""
    if re.match(r"^(https?|data):", data):
        return data
    return f"data:{image.get('media_type') or 'image/png'};base64,{data}"


def _anthropic_image(b: Dict[str, Any]) -> Dict[str, Any]:
    data = b.get("data") or ""
    if re.match(r"^https?:", data):
        return {"type": "image", "source": {"type": "url", "url": data}}
    return {"type": "image", "source": {"type": "base64", "media_type": b.get("media_type") or "image/png", "data": data}}


def to_anthropic(messages: Sequence[ModelMessage], system_prompt: Optional[str] = None) -> Dict[str, Any]:
    """`system` and `messages` of an Anthropic Messages request. `system` messages join the
    system prompt; tool results become `tool_result` blocks of the next user turn; consecutive
    messages of one role are merged, since the API alternates user and assistant."""
    system: List[str] = [system_prompt] if system_prompt else []
    out: List[Dict[str, Any]] = []

    def push(role: str, content: List[Dict[str, Any]]) -> None:
        if not content:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})

    for m in messages:
        role = m["role"]
        if role == "system":
            system.append(_text_of(m["content"]))
        elif role == "tool":
            content: List[Dict[str, Any]] = []
            text = _text_of(m["content"])
            if text:
                content.append({"type": "text", "text": text})
            content += [_anthropic_image(b) for b in _images_of(m["content"])]
            result: Dict[str, Any] = {"type": "tool_result", "tool_use_id": m.get("toolCallId") or "", "content": content}
            if m.get("isError"):
                result["is_error"] = True
            push("user", [result])
        else:
            blocks: List[Dict[str, Any]] = []
            for b in m["content"]:
                if b["type"] == "text" and b["text"]:  # type: ignore[typeddict-item]
                    blocks.append({"type": "text", "text": b["text"]})  # type: ignore[typeddict-item]
                elif b["type"] == "image" and b.get("data"):
                    blocks.append(_anthropic_image(b))  # type: ignore[arg-type]
                elif b["type"] == "tool_call":
                    blocks.append({"type": "tool_use", "id": b["id"], "name": b["name"], "input": b["input"]})  # type: ignore[typeddict-item]
            push(role, blocks)
    request: Dict[str, Any] = {"messages": out}
    if system:
        request["system"] = "\n\n".join(system)
    return request


def to_openai_chat(messages: Sequence[ModelMessage], system_prompt: Optional[str] = None) -> List[Dict[str, Any]]:
    """`messages` of an OpenAI Chat Completions request. Tool results become `tool` messages
    right after the assistant message that called them; images they hold (which `tool`
    messages cannot carry) follow in one user message after the run of results."""
    out: List[Dict[str, Any]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    tool_images: List[Dict[str, Any]] = []

    def flush() -> None:
        if tool_images:
            out.append({"role": "user", "content": list(tool_images)})
            tool_images.clear()

    for m in messages:
        role = m["role"]
        if role != "tool":
            flush()
        if role == "system":
            out.append({"role": "system", "content": _text_of(m["content"])})
        elif role == "user":
            if _images_of(m["content"]):
                parts: List[Dict[str, Any]] = []
                for b in m["content"]:
                    if b["type"] == "text":
                        parts.append({"type": "text", "text": b["text"]})  # type: ignore[typeddict-item]
                    elif b["type"] == "image" and b.get("data"):
                        parts.append({"type": "image_url", "image_url": {"url": image_url(b)}})  # type: ignore[arg-type]
                out.append({"role": "user", "content": parts})
            else:
                out.append({"role": "user", "content": _text_of(m["content"])})
        elif role == "assistant":
            calls = [
                {"id": b["id"], "type": "function",  # type: ignore[typeddict-item]
                 "function": {"name": b["name"], "arguments": _json(b["input"])}}  # type: ignore[typeddict-item]
                for b in m["content"] if b["type"] == "tool_call"
            ]
            msg: Dict[str, Any] = {"role": "assistant", "content": _text_of(m["content"]) or None}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": m.get("toolCallId") or "", "content": _text_of(m["content"])})
            images = _images_of(m["content"])
            if images:
                tool_images.append({"type": "text", "text": f"Images from the result of tool call {m.get('toolCallId')}:"})
                tool_images.extend({"type": "image_url", "image_url": {"url": image_url(b)}} for b in images)
    flush()
    return out


def to_openai_responses(messages: Sequence[ModelMessage], system_prompt: Optional[str] = None) -> Dict[str, Any]:
    """`instructions` and `input` of an OpenAI Responses request: tool calls become
    `function_call` items and their results `function_call_output` items."""
    items: List[Dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "system":
            items.append({"role": "system", "content": _text_of(m["content"])})
        elif role == "user":
            content: List[Dict[str, Any]] = []
            for b in m["content"]:
                if b["type"] == "text":
                    content.append({"type": "input_text", "text": b["text"]})  # type: ignore[typeddict-item]
                elif b["type"] == "image" and b.get("data"):
                    content.append({"type": "input_image", "image_url": image_url(b)})  # type: ignore[arg-type]
            items.append({"role": "user", "content": content})
        elif role == "assistant":
            text = _text_of(m["content"])
            if text:
                items.append({"role": "assistant", "content": text})
            for b in m["content"]:
                if b["type"] == "tool_call":
                    items.append({"type": "function_call", "call_id": b["id"], "name": b["name"],  # type: ignore[typeddict-item]
                                  "arguments": _json(b["input"])})  # type: ignore[typeddict-item]
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("toolCallId") or "", "output": _text_of(m["content"])})
            images = _images_of(m["content"])
            if images:
                items.append({"role": "user", "content": [
                    {"type": "input_text", "text": f"Images from the result of tool call {m.get('toolCallId')}:"},
                    *({"type": "input_image", "image_url": image_url(b)} for b in images),
                ]})
    request: Dict[str, Any] = {"input": items}
    if system_prompt:
        request["instructions"] = system_prompt
    return request


def _json(value: Any) -> str:
    """Arguments as OpenAI sends them: compact JSON, like JSON.stringify."""
    return json.dumps({} if value is None else value, separators=(",", ":"), ensure_ascii=False)


# Replies back into the log -------------------------------------------------------------------
# Each returns {"content": [ContentBlock, ...], "usage": Usage} ("usage" only when the reply had
# one): append it as {"type": "message", "role": "assistant", **turn}.


def _parse_arguments(args: Optional[str]) -> Any:
    """Tool-call arguments as sent: JSON text, parsed; text that is not JSON is kept as is."""
    if not args:
        return {}
    try:
        return json.loads(args)
    except json.JSONDecodeError:
        return args


def from_anthropic(response: Dict[str, Any]) -> Dict[str, Any]:
    """An Anthropic Messages response: `text`, `thinking` and `tool_use` blocks, and its usage."""
    content: List[Dict[str, Any]] = []
    for b in response.get("content") or []:
        if b.get("type") == "text":
            content.append({"type": "text", "text": b.get("text", "")})
        elif b.get("type") == "thinking":
            content.append({"type": "thinking", "thinking": b.get("thinking", "")})
        elif b.get("type") == "tool_use":
            content.append({"type": "tool_call", "id": b.get("id", ""), "name": b.get("name", ""), "input": b.get("input", {})})
    turn: Dict[str, Any] = {"content": content}
    u = response.get("usage")
    if u:
        turn["usage"] = {
            "input": u.get("input_tokens") or 0,
            "cacheRead": u.get("cache_read_input_tokens") or 0,
            "cacheWrite": u.get("cache_creation_input_tokens") or 0,
            "output": u.get("output_tokens") or 0,
        }
    return turn


def from_openai_chat(response: Dict[str, Any]) -> Dict[str, Any]:
    """An OpenAI Chat Completions response (its first choice): text, tool calls, and usage."""
    choices = response.get("choices") or [{}]
    message = choices[0].get("message") or {}
    content: List[Dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        content.append({"type": "tool_call", "id": call.get("id", ""), "name": fn.get("name", ""),
                        "input": _parse_arguments(fn.get("arguments"))})
    turn: Dict[str, Any] = {"content": content}
    u = response.get("usage")
    if u:
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        turn["usage"] = {"input": (u.get("prompt_tokens") or 0) - cached, "cacheRead": cached, "cacheWrite": 0,
                         "output": u.get("completion_tokens") or 0}
    return turn


def from_openai_responses(response: Dict[str, Any]) -> Dict[str, Any]:
    """An OpenAI Responses response: `message` text (and refusals), `function_call` items as
    tool calls, reasoning summaries as thinking, and usage."""
    content: List[Dict[str, Any]] = []
    for item in response.get("output") or []:
        kind = item.get("type")
        if kind == "message":
            text = "".join(c.get("text") or c.get("refusal") or "" for c in item.get("content") or [])
            if text:
                content.append({"type": "text", "text": text})
        elif kind == "reasoning":
            thinking = "\n".join(s.get("text") or "" for s in item.get("summary") or [])
            if thinking:
                content.append({"type": "thinking", "thinking": thinking})
        elif kind == "function_call":
            content.append({"type": "tool_call", "id": item.get("call_id", ""), "name": item.get("name", ""),
                            "input": _parse_arguments(item.get("arguments"))})
    turn: Dict[str, Any] = {"content": content}
    u = response.get("usage")
    if u:
        cached = (u.get("input_tokens_details") or {}).get("cached_tokens") or 0
        turn["usage"] = {"input": (u.get("input_tokens") or 0) - cached, "cacheRead": cached, "cacheWrite": 0,
                         "output": u.get("output_tokens") or 0}
    return turn
