"""Real Claude Code and Codex, non-interactive, through `soba proxy` to a scripted loopback model
(agent_upstream.py) that plays an agent loop of file reads (results of about 3k tokens) and
writes until it declares the task done. At windows where the agent's fixed part fits, the task
finishes, every tool call the model sees is paired with its result, no two compactions come
within three requests, and SOBA's summarization request shows the model the user's task. Where
the fixed part alone cannot fit (Claude Code at 32k), the agent gets one clear error naming the
window that would hold it."""
import json
import os
import select
import socket
import subprocess
import tempfile
import time
import unittest

from agent_upstream import AgentUpstream, DONE

TASK = "Summarize each data file into notes/ (one note per step), then say DONE."
# Tool rounds before the model declares the task done: enough to compact at every window run
# (Codex shortens long command output, so its rounds add less).
CLAUDE_STEPS = 20
CODEX_STEPS = 40


def strings(value):
    """Every string inside a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RealAgentCase(unittest.TestCase):
    def start(self, window, api, steps):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.workspace = os.path.join(self.tmp.name, "project")
        os.makedirs(self.workspace)
        big = []
        for i in range(3):
            name = f"data{i}.txt"
            with open(os.path.join(self.workspace, name), "w") as f:
                f.write(" ".join(f"record{i}x{j} value" for j in range(2400)))
            big.append(name)
        self.steps = steps
        self.upstream = AgentUpstream(steps=steps, big_files=big)
        self.addCleanup(self.upstream.close)
        port = free_port()
        env = dict(os.environ, SOBA_DATA_DIR=os.path.join(self.tmp.name, "data"),
                   SOBA_RUNTIME_DIR=os.path.join(self.tmp.name, "run"),
                   SOBA_CONFIG=os.path.join(self.tmp.name, "no-user-config.json"))
        self.proxy = subprocess.Popen(
            [os.environ["SOBA_BIN"], "proxy", "--standalone", "--listen", f"127.0.0.1:{port}",
             "--upstream", f"http://127.0.0.1:{self.upstream.port}", "--api", api,
             "--context-window", str(window)],
            cwd=self.workspace, env=env, stderr=subprocess.PIPE, text=True)
        self.addCleanup(self.stop)
        self.log = []
        deadline = time.time() + 20
        while time.time() < deadline:
            ready, _, _ = select.select([self.proxy.stderr], [], [], 0.2)
            if ready:
                line = self.proxy.stderr.readline()
                self.log.append(line)
                if "listening on" in line:
                    break
            if self.proxy.poll() is not None:
                self.fail("the proxy exited: " + "".join(self.log))
        self.home = os.path.join(self.tmp.name, "home")
        os.makedirs(self.home)
        return f"http://127.0.0.1:{port}"

    def stop(self):
        if self.proxy.returncode is None:
            self.proxy.terminate()
            self.log.append(self.proxy.communicate(timeout=10)[1])
            self.proxy.stderr.close()
        return "".join(self.log)

    def run_agent(self, argv, env):
        done = subprocess.run(argv, cwd=self.workspace, env=env, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        return done

    def claude(self, window):
        base = self.start(window, "anthropic", CLAUDE_STEPS)
        env = dict(os.environ, HOME=self.home, ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY="sk-ant-suite",
                   # Offline: no telemetry, update checks, error reports or surveys; and the
                   # permission bypass, which Claude Code refuses to root outside a sandbox.
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
                   DISABLE_AUTOUPDATER="1", DISABLE_ERROR_REPORTING="1", IS_SANDBOX="1")
        return self.run_agent([os.environ["CLAUDE_BIN"], "-p", TASK, "--dangerously-skip-permissions",
                               "--model", "claude-sonnet-4-5"], env)

    def codex(self, window):
        base = self.start(window, "openai", CODEX_STEPS)
        codex_home = os.path.join(self.home, ".codex")
        os.makedirs(codex_home)
        env = dict(os.environ, HOME=self.home, CODEX_HOME=codex_home, SOBA_SUITE_KEY="sk-suite")
        return self.run_agent([
            os.environ["CODEX_BIN"], "exec",
            "-c", 'model_provider="soba"', "-c", 'model_providers.soba.name="soba"',
            "-c", f'model_providers.soba.base_url="{base}/v1"',
            "-c", 'model_providers.soba.wire_api="responses"',
            "-c", 'model_providers.soba.env_key="SOBA_SUITE_KEY"',
            "-m", "gpt-5-codex", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", TASK], env)

    def request_lines(self, path):
        return [line for line in self.stop().splitlines() if f"POST {path} →" in line]

    def assert_finished(self, done, path):
        self.assertEqual(done.returncode, 0, done.stdout[-2000:] + done.stderr[-2000:])
        self.assertIn(DONE, done.stdout)
        self.assertEqual(self.upstream.step, self.steps, "every step of the loop ran")
        lines = self.request_lines(path)
        compacted = [n for n, line in enumerate(lines) if "compaction completed" in line]
        self.assertTrue(compacted, "the loop is long enough to compact: " + "\n".join(lines))
        for a, b in zip(compacted, compacted[1:]):
            self.assertGreaterEqual(b - a, 3, f"compactions at requests {a} and {b}:\n" + "\n".join(lines))
        self.assertTrue(self.upstream.summarizations, "SOBA summarized through the upstream")
        # The first summarization lists the user's task first; none lists what the agent
        # injected (Claude Code's <system-reminder>, Codex's <environment_context>) as the user's.
        # A later one lists only the messages since the previous capsule, which holds the task.
        for n, body in enumerate(self.upstream.summarizations):
            prompts = [s for s in strings(body) if "as typed:" in s]
            self.assertTrue(prompts, "the summarization lists the user's messages")
            listed = prompts[0].split("as typed:", 1)[1].split("\n## ", 1)[0].splitlines()
            items = [line for line in listed if line.startswith("- [")]
            for item in items:
                self.assertNotIn("system-reminder", item)
                self.assertNotIn("environment_context", item)
            if n == 0:
                self.assertTrue(items and TASK in items[0], f"the user's task comes first: {listed}")

    def test_claude_code_at_48k_and_64k_finishes_with_spaced_compactions(self):
        for window in (48000, 64000):
            with self.subTest(window=window):
                done = self.claude(window)
                self.assert_finished(done, "/v1/messages")
                for body in self.upstream.agent_requests:
                    calls, results = set(), set()
                    for m in body["messages"]:
                        for b in m["content"] if isinstance(m["content"], list) else []:
                            if b.get("type") == "tool_use":
                                calls.add(b["id"])
                            if b.get("type") == "tool_result":
                                results.add(b["tool_use_id"])
                    self.assertEqual(calls, results, "every tool call the model sees is paired")
                self.doCleanups()

    def test_claude_code_at_32k_is_told_the_window_its_system_prompt_and_tools_need(self):
        done = self.claude(32000)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("Prompt is too long", done.stdout)
        refused = [line for line in self.request_lines("/v1/messages") if "refused: too long" in line]
        self.assertTrue(refused, self.stop())
        self.assertIn("the system prompt and the tool schemas alone need", refused[0])
        self.assertIn("a context window of about", refused[0])
        self.assertEqual(self.upstream.agent_requests, [], "nothing oversized reaches the model")

    def test_codex_at_32k_and_64k_finishes_with_spaced_compactions(self):
        for window in (32000, 64000):
            with self.subTest(window=window):
                done = self.codex(window)
                self.assert_finished(done, "/v1/responses")
                for body in self.upstream.agent_requests:
                    items = body.get("input") or []
                    calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
                    outputs = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
                    self.assertEqual(calls, outputs, "every tool call the model sees is paired")
                self.doCleanups()


if __name__ == "__main__":
    unittest.main()
