"""A loopback fake of the OpenAI (Chat Completions and Responses) and Anthropic chat APIs for
the proxy suite.

It answers like the provider (whole and streamed), records every request body it gets, reports
usage, and gives scripted answers (errors) first when a test queued some. With `window` set it
refuses a chat request larger than that (a quarter of the body's bytes) with the provider's own
overflow error, as a model whose real window is smaller than the one the proxy was given; with
`tool_calls` queued, whole answers call a tool.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def overflow_error(path, window, prompt):
    """The error body OpenAI or Anthropic answers a prompt over the window with."""
    if path.endswith("/chat/completions") or path.endswith("/responses"):
        return json.dumps({"error": {
            "message": f"This model's maximum context length is {window} tokens. However, your messages "
                       f"resulted in {prompt} tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}).encode()
    return json.dumps({"type": "error", "error": {
        "type": "invalid_request_error", "message": f"prompt is too long: {prompt} tokens > {window} maximum"}}).encode()


def responses_answer(n, body, prompt):
    """A completed Responses API response: reasoning (encrypted when the request asks for it, as
    Codex and `store: false` clients do), then the answer."""
    reasoning = {"id": f"rs_{n}", "type": "reasoning",
                 "summary": [{"type": "summary_text", "text": f"**Planning step {n}**"}]}
    if "reasoning.encrypted_content" in (body.get("include") or []):
        reasoning["encrypted_content"] = f"gAAAAABo{n}-" + "Qk7" * 120
    message = {"id": f"msg_{n}", "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": f"answer number {n}"}]}
    return {"id": f"resp_{n}", "object": "response", "created_at": 1767225600, "status": "completed",
            "background": False, "error": None, "incomplete_details": None,
            "instructions": body.get("instructions"), "max_output_tokens": None, "model": body.get("model"),
            "output": [reasoning, message], "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"), "reasoning": {"effort": "medium", "summary": None},
            "store": body.get("store", True), "temperature": 1.0, "text": {"format": {"type": "text"}},
            "tool_choice": "auto", "tools": body.get("tools") or [], "top_p": 1.0, "truncation": "disabled",
            "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 4},
                      "total_tokens": prompt + 9},
            "metadata": {}}


def responses_events(response):
    """The events of a streamed response, named and ordered as the Responses API sends them."""
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [{"type": "response.created", "response": pending},
              {"type": "response.in_progress", "response": pending}]
    for i, item in enumerate(response["output"]):
        if item["type"] == "message":
            events.append({"type": "response.output_item.added", "output_index": i,
                           "item": {**item, "status": "in_progress", "content": []}})
            part = item["content"][0]
            at = {"item_id": item["id"], "output_index": i, "content_index": 0}
            events.append({"type": "response.content_part.added", **at,
                           "part": {"type": "output_text", "annotations": [], "text": ""}})
            half = len(part["text"]) // 2
            for delta in (part["text"][:half], part["text"][half:]):
                events.append({"type": "response.output_text.delta", **at, "delta": delta, "logprobs": []})
            events.append({"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []})
            events.append({"type": "response.content_part.done", **at, "part": part})
        else:
            events.append({"type": "response.output_item.added", "output_index": i,
                           "item": {**item, "summary": []}})
        events.append({"type": "response.output_item.done", "output_index": i, "item": item})
    events.append({"type": "response.completed", "response": response})
    for seq, e in enumerate(events):
        e["sequence_number"] = seq
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


class Upstream:
    def __init__(self):
        self.requests = []  # (method, path, headers dict, body bytes)
        self.streamed = []  # raw bytes of every streamed answer
        self.script = []  # (status, body str) answered before the normal ones
        self.window = None  # the model's real context window, in this fake's count
        self.overflows = 0  # chat requests refused as too long
        self.tool_calls = []  # tool call ids the next whole answers call a tool with
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self, method):
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                with upstream.lock:
                    upstream.requests.append((method, self.path, dict(self.headers), raw))
                    scripted = upstream.script.pop(0) if upstream.script else None
                    n = len(upstream.requests)
                if scripted:
                    return self._send(scripted[0], "application/json", scripted[1].encode())
                if method == "GET":
                    return self._send(200, "application/json", json.dumps({"object": "list", "data": [{"id": "gpt-4o"}]}).encode())
                body = json.loads(raw or b"{}")
                prompt = len(raw) // 4
                stream = bool(body.get("stream"))
                with upstream.lock:
                    too_long = upstream.window is not None and prompt > upstream.window
                    if too_long:
                        upstream.overflows += 1
                    tool = upstream.tool_calls.pop(0) if upstream.tool_calls and not (stream or too_long) else None
                if too_long:
                    return self._send(400, "application/json", overflow_error(self.path, upstream.window, prompt))
                if self.path.endswith("/responses"):
                    response = responses_answer(n, body, prompt)
                    if stream:
                        return self._stream(responses_events(response).encode())
                    return self._send(200, "application/json", json.dumps(response).encode())
                if self.path.endswith("/chat/completions"):
                    usage = {"prompt_tokens": prompt, "completion_tokens": 5}
                    if stream:
                        chunks = [
                            {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
                             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "answer "}, "finish_reason": None}]},
                            {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
                             "choices": [{"index": 0, "delta": {"content": f"number {n}"}, "finish_reason": "stop"}]},
                        ]
                        data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                        return self._stream(data.encode())
                    message = {"role": "assistant", "content": f"answer number {n}"}
                    if tool:
                        message["tool_calls"] = [{"id": tool, "type": "function", "function": {
                            "name": "read_file", "arguments": json.dumps({"path": "src/main.rs"})}}]
                    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
                              "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool else "stop"}],
                              "usage": {**usage, "total_tokens": prompt + 5}}
                    return self._send(200, "application/json", json.dumps(answer).encode())
                usage = {"input_tokens": prompt, "output_tokens": 7}
                if stream:
                    events = [
                        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": prompt, "output_tokens": 1}}}),
                        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"answer number {n}"}}),
                        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 7}}),
                        ("message_stop", {"type": "message_stop"}),
                    ]
                    data = "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events)
                    return self._stream(data.encode())
                content = [{"type": "text", "text": f"answer number {n}"}]
                if tool:
                    content.append({"type": "tool_use", "id": tool, "name": "read_file", "input": {"path": "src/main.rs"}})
                answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                          "content": content, "stop_reason": "tool_use" if tool else "end_turn",
                          "stop_sequence": None, "usage": usage}
                return self._send(200, "application/json", json.dumps(answer).encode())

            def _send(self, status, ctype, data):
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.send_header("x-request-id", "req_fake_1")
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, data):
                with upstream.lock:
                    upstream.streamed.append(data)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                # Two chunks: the proxy must pass a stream through as it arrives.
                half = len(data) // 2
                for part in (data[:half], data[half:]):
                    self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def do_POST(self):
                self._answer("POST")

            def do_GET(self):
                self._answer("GET")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def chats(self):
        with self.lock:
            return [json.loads(r[3]) for r in self.requests if r[0] == "POST"]

    def raw_bodies(self):
        with self.lock:
            return [r[3] for r in self.requests if r[0] == "POST"]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
