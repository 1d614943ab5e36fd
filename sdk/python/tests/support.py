"""A private daemon per test case: its own data and runtime folders, no user config."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any, Callable, List

from soba_sdk import SobaClient

REPO = Path(__file__).resolve().parents[3]
BIN = os.environ.get("SOBA_BIN") or str(REPO / "target" / "debug" / "soba")


def words(i: int) -> str:
    """About 3000 tokens of distinct text."""
    return " ".join(f"w{(i * 7919 + w) % 9973}" for w in range(1000))


def until(pred: Callable[[], bool], seconds: float = 5.0) -> None:
    end = time.monotonic() + seconds
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


class DaemonTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="soba-sdk-py-"))
        self.env = {
            **os.environ,
            "SOBA_DATA_DIR": str(self.base / "data"),
            "SOBA_RUNTIME_DIR": str(self.base / "run"),
            "SOBA_CONFIG": str(self.base / "no-user-config.json"),
            "SOBA_DAEMON_IDLE_SECS": "2",
        }
        self.clients: List[SobaClient] = []

    def tearDown(self) -> None:
        for c in self.clients:
            c.close()
        shutil.rmtree(self.base, ignore_errors=True)

    def workspace(self, name: str) -> str:
        """A workspace whose window is small enough (hard limit 9808, with the spec's 8192-token reserve) for a few messages to force a compaction."""
        ws = self.base / name
        (ws / ".soba").mkdir(parents=True)
        (ws / ".soba" / "config.json").write_text(json.dumps({
            "model": {"name": "gpt-4o", "contextWindow": 20000, "maxOutputTokens": 2000},
            # The spec's reserve (8192), not the one SOBA scales to a window below 64k by default.
            "compaction": {"keepRecentTokens": 1000, "minTokensForAutoCompact": 3000, "minReclaimableTokens": 500,
                           "safetyReserveTokens": 8192},
        }))
        return str(ws.resolve())

    def connect(self, ws: str, **kwargs: Any) -> SobaClient:
        c = SobaClient.spawn(bin=BIN, env=self.env, workspace_folders=[ws], **kwargs)
        self.clients.append(c)
        return c
