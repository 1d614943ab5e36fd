"""The README's loop, run from a fresh virtual environment that installed the SDK's wheel
(scripts/test-install): a 24k-token window (the small-window default of
docs/configuration.md), a scripted stand-in model that reads README.md with a tool, then
answers with its first line."""

import sys
from pathlib import Path

from soba_sdk import SobaClient

workspace = str(Path(sys.argv[1]).resolve())
system_prompt = "Be brief."
task = "What does the README say first?"


def model(messages):
    last = messages[-1]
    if last["role"] != "tool":
        return {"content": [{"type": "tool_call", "id": f"call_{len(messages)}", "name": "read_file",
                             "input": {"path": "README.md"}}]}
    text = "".join(b.get("text", "") for b in last["content"] if b["type"] == "text")
    return {"content": [{"type": "text", "text": f"The README starts with: {text.splitlines()[0]}"}]}


def run_tool(call):
    output = (Path(workspace) / call["input"]["path"]).read_text()
    return {"type": "tool_result", "callId": call["id"], "toolName": call["name"],
            "content": [{"type": "text", "text": output}], "isError": False}


with SobaClient.spawn(workspace_folders=[workspace]) as soba:  # $SOBA_BIN
    opened = soba.open_session({"workspace": workspace, "model": {"name": "local-24k", "contextWindow": 24000}})
    sid = opened["sessionId"]
    soba.append({"sessionId": sid, "entries": [
        {"type": "setting", "systemPrompt": system_prompt},
        {"type": "message", "role": "user", "content": [{"type": "text", "text": task}]},
    ]})
    while True:
        messages = soba.preflight({"sessionId": sid})["messages"]
        reply = model(messages)
        soba.append({"sessionId": sid, "entries": [{"type": "message", "role": "assistant", **reply}]})
        calls = [b for b in reply["content"] if b["type"] == "tool_call"]
        if not calls:
            answer = "".join(b["text"] for b in reply["content"] if b["type"] == "text")
            break
        soba.append({"sessionId": sid, "entries": [run_tool(c) for c in calls]})
    soba.turn_complete({"sessionId": sid})
    soba.close_session({"sessionId": sid})
    print(f"{answer} (hard limit {opened['budget']['hardLimit']})")
