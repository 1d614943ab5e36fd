"""A loopback model for real coding agents (Claude Code over Anthropic Messages, Codex over the
Responses API) behind `soba proxy`: it plays an agent loop of tool calls that read and write
files with results of about 3k tokens, then declares the task done. Requests that offer no tools
(titles, quota checks) get a short text; SOBA's own summarization requests are recorded and
answered with a capsule."""

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SUMMARIZER_MARK = "You write the Context Capsule"
DONE = "DONE: every note is written."


def sse(events):
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


class AgentUpstream:
    def __init__(self, steps, big_files):
        self.steps = steps  # tool rounds before the model declares the task done
        self.big_files = big_files  # paths the loop reads (about 3k tokens each)
        self.step = 0
        self.agent_requests = []  # bodies of the agent's own tool-offering requests
        self.summarizations = []  # bodies of SOBA's summarization requests
        self.other = []
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send(200, "application/json", json.dumps({"object": "list", "data": []}).encode())

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                body = json.loads(raw or b"{}")
                prompt = max(1, len(raw) // 4)
                if "count_tokens" in self.path:
                    return self._send(200, "application/json", json.dumps({"input_tokens": prompt}).encode())
                text = json.dumps(body)
                responses = self.path.split("?")[0].endswith("/responses")
                with upstream.lock:
                    if SUMMARIZER_MARK in text:
                        upstream.summarizations.append(body)
                        action = ("text", json.dumps({"goal": "write the notes the user asked for"}))
                    elif body.get("tools"):
                        upstream.agent_requests.append(body)
                        action = upstream.next_action(body, responses)
                    else:
                        upstream.other.append(body)
                        action = ("text", "ok")
                if responses:
                    return self._responses(body, action, prompt)
                return self._messages(body, action, prompt)

            def _messages(self, body, action, prompt):
                kind, value = action
                if kind == "text":
                    block = {"type": "text", "text": ""}
                    delta = {"type": "text_delta", "text": value}
                    stop = "end_turn"
                else:
                    name, args = value
                    block = {"type": "tool_use", "id": f"toolu_{self.server.n()}", "name": name, "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
                    stop = "tool_use"
                usage = {"input_tokens": prompt, "output_tokens": 20}
                events = [
                    {"type": "message_start", "message": {"id": f"msg_{self.server.n()}", "type": "message", "role": "assistant",
                                                          "model": body.get("model"), "content": [], "stop_reason": None,
                                                          "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}},
                    {"type": "content_block_start", "index": 0, "content_block": block},
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                    {"type": "content_block_stop", "index": 0},
                    {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 20}},
                    {"type": "message_stop"},
                ]
                if body.get("stream"):
                    return self._stream(sse(events))
                content = [{"type": "text", "text": value}] if kind == "text" else [{**block, "input": value[1]}]
                answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model"),
                          "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}
                return self._send(200, "application/json", json.dumps(answer).encode())

            def _responses(self, body, action, prompt):
                kind, value = action
                n = self.server.n()
                if kind == "text":
                    item = {"id": f"msg_{n}", "type": "message", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "annotations": [], "text": value}]}
                else:
                    name, args = value
                    item = {"id": f"fc_{n}", "type": "function_call", "status": "completed", "call_id": f"call_{n}",
                            "name": name, "arguments": json.dumps(args)}
                response = {"id": f"resp_{n}", "object": "response", "created_at": 1767225600, "status": "completed",
                            "model": body.get("model"), "output": [item], "error": None, "incomplete_details": None,
                            "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                                      "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
                                      "total_tokens": prompt + 20}}
                if not body.get("stream"):
                    return self._send(200, "application/json", json.dumps(response).encode())
                pending = {**response, "status": "in_progress", "output": [], "usage": None}
                events = [{"type": "response.created", "response": pending},
                          {"type": "response.output_item.added", "output_index": 0, "item": item},
                          {"type": "response.output_item.done", "output_index": 0, "item": item},
                          {"type": "response.completed", "response": response}]
                for seq, e in enumerate(events):
                    e["sequence_number"] = seq
                return self._stream(sse(events))

            def _send(self, status, ctype, data):
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", "req_agent_upstream")
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, data):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        ids = itertools.count(1)

        class Server(ThreadingHTTPServer):
            def n(self):
                # itertools.count's next() is atomic under the GIL: ids are never shared.
                return next(ids)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next_action(self, body, responses):
        """The loop's next step for the agent's request: read a big file, write a note, or done."""
        names = {t.get("name") for t in body.get("tools") or []}
        if self.step >= self.steps:
            return ("text", DONE)
        k = self.step
        self.step += 1
        path = self.big_files[k % len(self.big_files)]
        note = f"notes/note{k}.txt"
        if not responses:
            if k % 2 == 0 and "Read" in names:
                return ("tool", ("Read", {"file_path": path}))
            return ("tool", ("Bash", {"command": f"mkdir -p notes && wc -w {path} > {note}",
                                      "description": "Write a note"}))
        # Codex: whichever shell tool it offers.
        command = f"cat {path}" if k % 2 == 0 else f"mkdir -p notes && wc -w {path} > {note}"
        if "exec_command" in names:
            return ("tool", ("exec_command", {"cmd": command}))
        if "shell_command" in names:
            return ("tool", ("shell_command", {"command": command}))
        return ("tool", ("shell", {"command": ["bash", "-lc", command]}))

    def close(self):
        self.server.shutdown()
        self.server.server_close()
