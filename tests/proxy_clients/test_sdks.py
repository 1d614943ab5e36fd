"""The official openai and anthropic Python SDKs, and aider, through `soba proxy` to a loopback
fake upstream: conversations are compacted and stay under the hard limit (Chat Completions, the
Responses API and Anthropic Messages), streams reach the client byte for byte, upstream errors
reach it as the same error, and conversations that open alike keep sessions of their own."""

import glob
import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import anthropic
import openai

from fake_upstream import Upstream

WINDOW, MAX_OUTPUT, RESERVE = 20000, 2000, 8192
HARD_LIMIT = WINDOW - MAX_OUTPUT - RESERVE
KEY = "sk-proxy-suite-secret"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def filler(turn, words):
    return " ".join(f"step{turn}x{i} checks module" for i in range(words // 3))


class ProxyCase(unittest.TestCase):
    # The window the proxy is told, and the workspace's configuration.
    window = WINDOW
    # The maximum output the proxy is told; None leaves the model's, scaled to the window.
    max_output = MAX_OUTPUT
    config = {"compaction": {"keepRecentTokens": 1500, "minTokensForAutoCompact": 3000,
                             "minReclaimableTokens": 500},
              "summarizer": {"provider": "local"}}

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.workspace = os.path.join(self.tmp.name, "project")
        os.makedirs(os.path.join(self.workspace, ".soba"))
        with open(os.path.join(self.workspace, ".soba", "config.json"), "w") as f:
            json.dump(self.config, f)
        self.upstream = Upstream()
        port = free_port()
        env = dict(os.environ, SOBA_DATA_DIR=os.path.join(self.tmp.name, "data"),
                   SOBA_RUNTIME_DIR=os.path.join(self.tmp.name, "run"),
                   SOBA_CONFIG=os.path.join(self.tmp.name, "no-user-config.json"))
        self.proxy = subprocess.Popen(
            [os.environ["SOBA_BIN"], "proxy", "--standalone", "--listen", f"127.0.0.1:{port}",
             "--upstream", f"http://127.0.0.1:{self.upstream.port}",
             "--context-window", str(self.window),
             *(["--max-output-tokens", str(self.max_output)] if self.max_output else [])],
            cwd=self.workspace, env=env, stderr=subprocess.PIPE, text=True)
        self.stderr = []
        deadline = time.time() + 20
        while time.time() < deadline:
            ready, _, _ = select.select([self.proxy.stderr], [], [], 0.2)
            if ready:
                line = self.proxy.stderr.readline()
                self.stderr.append(line)
                if "listening on" in line:
                    break
            if self.proxy.poll() is not None:
                self.fail("the proxy exited: " + "".join(self.stderr))
        self.base = f"http://127.0.0.1:{port}"

    def stop(self):
        """Stop the proxy; everything it logged."""
        if self.proxy.returncode is None:
            self.proxy.terminate()
            self.stderr.append(self.proxy.communicate(timeout=10)[1])
            self.proxy.stderr.close()
        return "".join(self.stderr)

    def tearDown(self):
        log = self.stop()
        self.upstream.close()
        self.tmp.cleanup()
        self.assertNotIn(KEY, log, "the key is never logged")

    def request_lines(self):
        """The proxy's request log lines, once it has stopped."""
        return [line for line in self.stop().splitlines() if " → " in line and "POST" in line]

    def openai(self):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=KEY, max_retries=0)

    def anthropic(self):
        return anthropic.Anthropic(base_url=self.base, api_key=KEY, max_retries=0)

    def session_logs(self):
        return glob.glob(os.path.join(self.tmp.name, "data", "workspaces", "*", "sessions", "*.jsonl"))

    def assert_sessions_without_rewinds(self, n):
        logs = self.session_logs()
        self.assertEqual(len(logs), n, "one session per conversation")
        for log in logs:
            with open(log) as f:
                types = [json.loads(line)["type"] for line in f if line.strip()]
            self.assertNotIn("rewind", types, f"{log} was rewound: {types}")

    def wait_for_log(self, needle, timeout=10):
        """The proxy's log line holding `needle`."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = [line for line in "".join(self.stderr).splitlines() if needle in line]
            if found:
                return found[0]
            ready, _, _ = select.select([self.proxy.stderr], [], [], 0.2)
            if ready:
                # Unbuffered: a buffered readline would hide lines from the next select.
                self.stderr.append(os.read(self.proxy.stderr.fileno(), 65536).decode())
        self.fail(f"no log line with {needle!r}: " + "".join(self.stderr))

    def assert_under_hard_limit(self):
        for i, body in enumerate(self.upstream.chats()):
            # A conservative count: about four characters of JSON per token, an overestimate.
            estimate = len(json.dumps(body["messages"])) // 4
            self.assertLessEqual(estimate, HARD_LIMIT, f"request {i} is over the hard limit")


class OpenAISdk(ProxyCase):
    def test_a_long_conversation_is_compacted_and_stays_under_the_hard_limit(self):
        client = self.openai()
        messages = [{"role": "system", "content": "You are a careful coding agent."}]
        for turn in range(24):
            messages.append({"role": "user", "content": filler(turn, 520)})
            r = client.chat.completions.create(model="gpt-4o", messages=messages)
            messages.append({"role": "assistant", "content": r.choices[0].message.content})
        chats = self.upstream.chats()
        self.assertEqual(len(chats), 24)
        self.assert_under_hard_limit()
        last = chats[-1]["messages"]
        self.assertEqual(last[0], messages[0], "the system prompt goes as sent")
        self.assertIn("Context Capsule", last[1]["content"])
        self.assertLess(len(last), len(messages))

    def test_a_stream_reaches_the_client_byte_identical(self):
        client = self.openai()
        with client.chat.completions.with_streaming_response.create(
                model="gpt-4o", stream=True, messages=[{"role": "user", "content": "hi"}]) as r:
            self.assertEqual(r.headers["content-type"], "text/event-stream")
            got = b"".join(r.iter_bytes())
        self.assertEqual(got, self.upstream.streamed[-1])
        # And parsed by the SDK as usual.
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="gpt-4o", stream=True, messages=[{"role": "user", "content": "hi"}]) if c.choices)
        self.assertTrue(text.startswith("answer number"), text)

    def test_an_upstream_error_reaches_the_client_as_the_same_error(self):
        body = {"error": {"message": "Rate limit reached for gpt-4o", "type": "requests",
                          "param": None, "code": "rate_limit_exceeded"}}
        self.upstream.script.append((429, json.dumps(body)))
        with self.assertRaises(openai.RateLimitError) as caught:
            self.openai().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(caught.exception.status_code, 429)
        self.assertEqual(caught.exception.body, body["error"])
        self.assertEqual(caught.exception.response.headers["x-request-id"], "req_fake_1")

    def test_two_interleaved_conversations_that_open_alike_get_two_sessions(self):
        client = self.openai()
        opening = [{"role": "system", "content": "You are a careful coding agent."},
                   {"role": "user", "content": "Fix the failing test in src/parser.rs"}]
        histories = [list(opening), list(opening)]
        for turn in range(4):
            for k, messages in enumerate(histories):
                if turn:
                    messages.append({"role": "user", "content": f"copy {k}, step {turn}"})
                r = client.chat.completions.create(model="gpt-4o", messages=messages)
                messages.append({"role": "assistant", "content": r.choices[0].message.content})
        self.assert_sessions_without_rewinds(2)

    def test_models_are_listed_through_the_proxy(self):
        self.assertEqual([m.id for m in self.openai().models.list()], ["gpt-4o"])


class OpenAIResponsesSdk(ProxyCase):
    def test_a_long_conversation_whole_and_streamed_is_compacted_with_reasoning_byte_identical(self):
        client = self.openai()
        items = []
        sent = []  # each request's input as the SDK serialized it
        for turn in range(24):
            items.append({"role": "user", "content": filler(turn, 520)})
            sent.append([dict(i) for i in items])
            kwargs = dict(model="gpt-5", instructions="You are a careful coding agent.", input=items,
                          store=False, include=["reasoning.encrypted_content"])
            if turn % 2:
                output = [e.item for e in client.responses.create(stream=True, **kwargs)
                          if e.type == "response.output_item.done"]
            else:
                r = client.responses.create(**kwargs)
                self.assertEqual(r.output_text, f"answer number {len(sent)}")
                output = r.output
            items.extend(o.model_dump(exclude_none=True) for o in output)
        chats = self.upstream.chats()
        self.assertEqual(len(chats), 24)
        for i, body in enumerate(chats):
            estimate = len(json.dumps(body["input"])) // 4
            self.assertLessEqual(estimate, HARD_LIMIT, f"request {i} is over the hard limit")
            self.assertEqual(body["instructions"], "You are a careful coding agent.")
            self.assertEqual(body["include"], ["reasoning.encrypted_content"])
        last = chats[-1]["input"]
        self.assertEqual(last[0]["role"], "user")
        self.assertIn("Context Capsule", last[0]["content"][0]["text"])
        self.assertLess(len(last), len(items))
        # Every reasoning item upstream is one the SDK sent, its encrypted content byte for byte.
        raw = self.upstream.raw_bodies()
        reasoning = [(i, item) for i, body in enumerate(chats) for item in body["input"]
                     if item.get("type") == "reasoning"]
        self.assertTrue(any(item.get("type") == "reasoning" for item in last),
                        "the retained tail keeps its reasoning")
        for i, item in reasoning:
            self.assertIn(item, sent[i])
            self.assertIn(json.dumps(item["encrypted_content"]).encode(), raw[i])

    def test_a_stream_reaches_the_client_byte_identical(self):
        with self.openai().responses.with_streaming_response.create(
                model="gpt-5", input="hi", stream=True) as r:
            self.assertEqual(r.headers["content-type"], "text/event-stream")
            got = b"".join(r.iter_bytes())
        self.assertEqual(got, self.upstream.streamed[-1])

    def test_previous_response_id_goes_upstream_as_sent_and_is_recorded(self):
        client = self.openai()
        first = client.responses.create(model="gpt-5", input="list the modules")
        second = client.responses.create(model="gpt-5", previous_response_id=first.id, input="and the tests?")
        self.assertEqual(second.output_text, "answer number 2")
        self.assertEqual(self.upstream.chats()[1],
                         {"model": "gpt-5", "previous_response_id": "resp_1", "input": "and the tests?"})
        line = self.wait_for_log("recorded, not compacted")
        self.assertIn("previous_response_id", line)


class AnthropicSdk(ProxyCase):
    def test_a_long_streamed_conversation_is_compacted_and_stays_under_the_hard_limit(self):
        client = self.anthropic()
        messages = []
        for turn in range(24):
            messages.append({"role": "user", "content": filler(turn, 520)})
            with client.messages.stream(model="claude-sonnet-4-5", max_tokens=1000,
                                        system="Be brief.", messages=messages) as s:
                text = s.get_final_text()
            messages.append({"role": "assistant", "content": text})
        chats = self.upstream.chats()
        self.assert_under_hard_limit()
        self.assertEqual(chats[-1]["system"], "Be brief.")
        first = chats[-1]["messages"][0]["content"]
        first_text = first if isinstance(first, str) else first[0]["text"]
        self.assertIn("Context Capsule", first_text)
        roles = [m["role"] for m in chats[-1]["messages"]]
        self.assertTrue(all(a != b for a, b in zip(roles, roles[1:])), f"turns alternate: {roles}")

    def test_two_interleaved_streamed_conversations_that_open_alike_get_two_sessions(self):
        client = self.anthropic()
        histories = [[], []]
        for turn in range(4):
            for k, messages in enumerate(histories):
                ask = "Fix the failing test in src/parser.rs" if turn == 0 else f"copy {k}, step {turn}"
                messages.append({"role": "user", "content": ask})
                with client.messages.stream(model="claude-sonnet-4-5", max_tokens=100,
                                            system="Be brief.", messages=messages) as s:
                    text = s.get_final_text()
                messages.append({"role": "assistant", "content": text})
        self.assert_sessions_without_rewinds(2)

    def test_a_stream_reaches_the_client_byte_identical(self):
        with self.anthropic().messages.with_streaming_response.create(
                model="claude-sonnet-4-5", max_tokens=100, stream=True,
                messages=[{"role": "user", "content": "hi"}]) as r:
            got = b"".join(r.iter_bytes())
        self.assertEqual(got, self.upstream.streamed[-1])

    def test_an_upstream_error_reaches_the_client_as_the_same_error(self):
        body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        self.upstream.script.append((529, json.dumps(body)))
        with self.assertRaises(anthropic.APIStatusError) as caught:
            self.anthropic().messages.create(model="claude-sonnet-4-5", max_tokens=10,
                                             messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(caught.exception.status_code, 529)
        self.assertEqual(caught.exception.body, body)

    def test_a_context_overflow_is_recovered_with_one_retry(self):
        client = self.anthropic()
        messages = []
        for turn in range(6):
            messages.append({"role": "user", "content": f"look at part {turn}"})
            messages.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": f"t{turn}", "name": "read_file", "input": {"path": f"src/p{turn}.rs"}}]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{turn}", "content": filler(turn, 700)},
                {"type": "text", "text": "go on"}]})
            messages.append({"role": "assistant", "content": f"done with {turn}"})
        messages.append({"role": "user", "content": "and now?"})
        self.upstream.script.append((400, json.dumps({"type": "error", "error": {
            "type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}})))
        r = client.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=messages)
        self.assertTrue(r.content[0].text.startswith("answer number"))
        chats = self.upstream.chats()
        self.assertEqual(len(chats), 2, "one retry")
        self.assertLess(len(json.dumps(chats[1])), len(json.dumps(chats[0])))
        # Tool results still follow their calls in the retry.
        msgs = chats[1]["messages"]
        for i, m in enumerate(msgs):
            if isinstance(m["content"], list):
                for b in m["content"]:
                    if b.get("type") == "tool_result":
                        prev = msgs[i - 1]["content"]
                        ids = [c["id"] for c in prev if isinstance(prev, list) and c.get("type") == "tool_use"]
                        self.assertIn(b["tool_use_id"], ids)


class Aider(ProxyCase):
    """Aider opens every run with the same messages (its rules, the files in the chat, an
    "Ok" of its own as the assistant): two runs in one repository are two conversations."""

    def aider(self, task):
        home = os.path.join(self.tmp.name, "home")
        os.makedirs(home, exist_ok=True)
        done = subprocess.run(
            [os.environ["AIDER_BIN"], "--message", task, "--yes-always", "--no-git",
             "--model", "gpt-4o", "--openai-api-base", self.base + "/v1", "--openai-api-key", KEY,
             "--no-check-update", "--analytics-disable", "--no-show-model-warnings", "--no-pretty",
             "hello.py"],
            cwd=self.workspace, env=dict(os.environ, HOME=home), capture_output=True, text=True,
            timeout=300)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("answer number", done.stdout)

    def test_two_runs_in_one_repository_get_two_sessions(self):
        with open(os.path.join(self.workspace, "hello.py"), "w") as f:
            f.write("print('hi')\n")
        self.aider("add a docstring")
        self.aider("rename the function")
        chats = self.upstream.chats()
        self.assertEqual(len(chats), 2)
        self.assertEqual(chats[0]["messages"][:3], chats[1]["messages"][:3], "the runs open alike")
        self.assert_sessions_without_rewinds(2)


class SmallerRealWindow(ProxyCase):
    """A model whose real window (24000 in the fake's count) is below the one the proxy is told
    (64000), with the default keepRecentTokens: a ~27k history overflows once, SOBA learns the
    provider's window from its error, the retry fits, and the rest of the turn does not overflow."""

    window = 64000
    config = {"compaction": {"keepRecentTokens": 20000}, "summarizer": {"provider": "local"}}
    steps = 4

    def setUp(self):
        super().setUp()
        self.upstream.window = 24000
        self.upstream.tool_calls = [f"read_{i}" for i in range(self.steps)]

    def assert_learned_once(self):
        self.assertEqual(self.upstream.overflows, 1, "".join(self.stderr))
        lines = self.request_lines()
        self.assertEqual(len(lines), self.steps, lines)
        self.assertIn("compaction completed (overflow)", lines[0])
        self.assertIn("retried after overflow", lines[0])
        for line in lines[1:]:
            self.assertNotIn("overflow", line)
        for body in self.upstream.chats()[1:]:
            self.assertLessEqual(len(json.dumps(body)) // 4, 24000)

    def test_openai_learns_the_window_from_its_error(self):
        client = self.openai()
        self.addCleanup(client.close)
        messages = []
        for turn in range(12):
            messages.append({"role": "user", "content": filler(turn, 550)})
            messages.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": f"c{turn}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/p{turn}.rs"})}}]})
            messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": filler(100 + turn, 550)})
            messages.append({"role": "assistant", "content": f"done with {turn}"})
        messages.append({"role": "user", "content": "now read the remaining modules"})
        for step in range(self.steps):
            r = client.chat.completions.create(model="gpt-4o", messages=messages)
            call = r.choices[0].message.tool_calls[0]
            messages.append(r.choices[0].message.model_dump(exclude_none=True))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": filler(200 + step, 1000)})
        self.assert_learned_once()

    def test_anthropic_learns_the_window_from_its_error(self):
        client = self.anthropic()
        self.addCleanup(client.close)
        messages = []
        for turn in range(12):
            messages.append({"role": "user", "content": filler(turn, 550)})
            messages.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": f"t{turn}", "name": "read_file", "input": {"path": f"src/p{turn}.rs"}}]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{turn}", "content": filler(100 + turn, 550)}]})
            messages.append({"role": "assistant", "content": f"done with {turn}"})
        messages.append({"role": "user", "content": "now read the remaining modules"})
        for step in range(self.steps):
            r = client.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=messages)
            use = next(b for b in r.content if b.type == "tool_use")
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": filler(200 + step, 1000)}]})
        self.assert_learned_once()


class SmallWindowLoop:
    """An agent loop through the proxy in a small window on the defaults (only the window given),
    with tool results of about 2.9k tokens: the task finishes, compactions come at most once in
    three requests, every tool call upstream keeps its result, and the session log stays small.
    Mixed into a ProxyCase per window."""

    max_output = None
    # Capsules from the local builder: the fake's answers are no summaries.
    config = {"summarizer": {"provider": "local"}}
    reads = 16

    def setUp(self):
        super().setUp()
        self.upstream.tool_calls = [f"read_{i}" for i in range(self.reads)]

    def tool_output(self, n):
        """About 2.9k tokens in the fake's count (a quarter of the bytes)."""
        return filler(1000 + n, 1245)

    def hard_limit(self):
        """The window less the maximum output (a quarter of a small window) and the safety
        reserve (8192 scaled to the window)."""
        return self.window - self.window // 4 - 8192 * self.window // 64000

    def assert_loop_had_room(self, pairs):
        lines = self.request_lines()
        self.assertEqual(len(lines), self.reads + 1, "the task finished: every read, then the answer")
        at = [i for i, line in enumerate(lines) if "compaction completed" in line]
        self.assertEqual([line for line in lines if "compaction" in line and "compaction completed" not in line], [])
        chats = self.upstream.chats()
        self.assertEqual(len(chats), self.reads + 1, "no request of the proxy's own upstream")
        peak = max(len(raw) // 4 for raw in self.upstream.raw_bodies())
        hard_limit = self.hard_limit()
        figures = (f"window {self.window}: {len(lines)} inferences, {len(at)} compactions at requests {at}, "
                   f"peak input {peak} of hard limit {hard_limit} ({100 * peak / hard_limit:.0f}%)")
        print(f"\n   {figures}", file=sys.stderr)
        self.assertGreaterEqual(len(at), 2, "the history is several windows long: the loop compacted")
        self.assertTrue(all(b - a >= 3 for a, b in zip(at, at[1:])), figures)
        self.assertLessEqual(peak, hard_limit, figures)
        for i, body in enumerate(chats):
            calls, results = pairs(body)
            self.assertEqual(calls, results, f"request {i}: every tool call with its result")
        logs = self.session_logs()
        self.assertEqual(len(logs), 1, logs)
        with open(logs[0]) as f:
            records = [json.loads(line) for line in f if line.strip()]
        # A completed compaction is its capsule in the log (other outcomes a `compaction` record).
        self.assertEqual(len([r for r in records if r["type"] in ("capsule", "compaction")]), len(at),
                         "the log records each compaction once")
        size = os.path.getsize(logs[0])
        self.assertLess(size, 600_000, f"the session log is {size} bytes")

    def test_openai_loop_finishes_with_room_between_compactions(self):
        client = self.openai()
        self.addCleanup(client.close)
        messages = [{"role": "system", "content": "You are a careful coding agent."},
                    {"role": "user", "content": "Read every module, then say how many you read."}]
        for step in range(self.reads + 1):
            r = client.chat.completions.create(model="gpt-4o", messages=messages)
            message = r.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": self.tool_output(step)})
        self.assertIsNone(message.tool_calls, "the task finished")

        def pairs(body):
            calls = sorted(c["id"] for m in body["messages"] if m["role"] == "assistant"
                           for c in m.get("tool_calls") or [])
            results = sorted(m["tool_call_id"] for m in body["messages"] if m["role"] == "tool")
            return calls, results
        self.assert_loop_had_room(pairs)

    def test_anthropic_loop_finishes_with_room_between_compactions(self):
        client = self.anthropic()
        self.addCleanup(client.close)
        messages = [{"role": "user", "content": "Read every module, then say how many you read."}]
        for step in range(self.reads + 1):
            r = client.messages.create(model="claude-sonnet-4-5", max_tokens=1000, system="Be brief.",
                                       messages=messages)
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]})
            uses = [b for b in r.content if b.type == "tool_use"]
            if not uses:
                break
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": self.tool_output(step)} for u in uses]})
        self.assertEqual(r.stop_reason, "end_turn", "the task finished")

        def pairs(body):
            blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
            calls = sorted(b["id"] for b in blocks if b.get("type") == "tool_use")
            results = sorted(b["tool_use_id"] for b in blocks if b.get("type") == "tool_result")
            return calls, results
        self.assert_loop_had_room(pairs)


class SmallWindowLoop16k(SmallWindowLoop, ProxyCase):
    window = 16384


class SmallWindowLoop32k(SmallWindowLoop, ProxyCase):
    window = 32768


class RunScript(unittest.TestCase):
    """tests/proxy_clients/run when the SDKs cannot be installed (PyPI unreachable)."""

    def run_without_pypi(self, ci):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, XDG_CACHE_HOME=cache, CI=ci, PIP_RETRIES="0", PIP_TIMEOUT="1",
                       PIP_INDEX_URL=f"http://127.0.0.1:{free_port()}/simple", SOBA_BIN="/nonexistent")
            env.pop("VIRTUAL_ENV", None)
            done = subprocess.run([os.path.join(os.path.dirname(os.path.abspath(__file__)), "run")],
                                  env=env, capture_output=True, text=True, timeout=120)
            left = os.listdir(os.path.join(cache, "soba-test"))
        self.assertEqual(left, [], "no half-installed venv is kept")
        return done

    def test_a_failed_install_is_a_failure_under_ci(self):
        done = self.run_without_pypi("true")
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("pip could not install", done.stderr)
        self.assertIn("FAILED (CI=true)", done.stderr)

    def test_a_failed_install_is_skipped_loudly_outside_ci(self):
        done = self.run_without_pypi("")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("!! SKIPPED", done.stderr)
        self.assertIn("Check that PyPI is reachable", done.stderr)


if __name__ == "__main__":
    unittest.main()
