"""A stand-in for the ``vllm`` executable: ``vllm serve MODEL --port P --host H [options]``
starts the fake OpenAI-compatible server (tests/fakeserver.py) on that port and serves until
SIGTERM/SIGINT. The tests put it on ``PATH`` as ``vllm``.

Environment:
    FAKE_VLLM_RECORD: a file receiving one JSON line per event: ``{"argv": [...], "pid": N}``
        at start, ``{"ready": true}`` when listening, ``{"stopped": "SIGTERM"}`` at the end.
    FAKE_VLLM_STARTUP_S: seconds to wait before listening (a model loading).
    FAKE_VLLM_FAIL: exit at once with status 3 after printing an error (a bad option).
    FAKE_VLLM_DELAY_S: seconds every answer is delayed.
    FAKE_VLLM_HOLD_AFTER: answer this many chat requests, then hold every later one unanswered
        until the server is stopped (recording ``{"held": n}`` for each), so a test can signal a
        run that is certainly still playing.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakeserver import FakeModelServer, Request  # noqa: E402


def record(event: dict) -> None:
    path = os.environ.get("FAKE_VLLM_RECORD")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event) + "\n")


def main(argv: list[str]) -> int:
    record({"argv": argv, "pid": os.getpid()})
    if os.environ.get("FAKE_VLLM_FAIL"):
        print("ValueError: unrecognized option --bogus (fake vllm)", flush=True)
        return 3
    if not argv or argv[0] != "serve" or "--port" not in argv:
        print(f"usage: vllm serve MODEL --port PORT, got {argv}", flush=True)
        return 2
    port = int(argv[argv.index("--port") + 1])
    stop = threading.Event()
    stopped_by: list[str] = []

    def on_signal(signum: int, frame: object) -> None:
        stopped_by.append(signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    time.sleep(float(os.environ.get("FAKE_VLLM_STARTUP_S", "0")))
    print(f"INFO: loading {argv[1]} (fake)", flush=True)
    hold_after = os.environ.get("FAKE_VLLM_HOLD_AFTER")
    answered = [0]
    lock = threading.Lock()

    def plan(request: Request) -> str:
        with lock:
            answered[0] += 1
            n = answered[0]
        if hold_after is None or n <= int(hold_after):
            return "ok"
        record({"held": n, "t": time.time()})
        stop.wait()  # until SIGTERM/SIGINT: the run cannot finish before it is signalled
        return "close"

    with FakeModelServer(plan, port=port, delay_s=float(os.environ.get("FAKE_VLLM_DELAY_S", "0"))):
        record({"ready": True})
        print(f"INFO: Uvicorn running on http://127.0.0.1:{port}", flush=True)
        while not stop.wait(0.1):
            pass
    record({"stopped": stopped_by[0] if stopped_by else "?"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
