"""``--serve``: start ``vllm serve`` for the run and stop it afterwards.

The server runs as a child process in its own process group on a free loopback port, with tool
calling on (``--enable-auto-tool-choice --tool-call-parser hermes``) and any pass-through
options (``--tensor-parallel-size``, ...). The run waits until ``GET /v1/models`` answers and
stops the whole process group when the run ends, also on Ctrl-C, SIGTERM or an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

__all__ = ["ServeError", "VLLMServer", "free_port", "serve_command", "serving"]

DEFAULT_TOOL_PARSER = "hermes"


class ServeError(ValueError):
    """The model server could not be started (not installed, exited, never became ready).

    A ``ValueError`` so that the command line reports it like bad input (exit status 2).
    """


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def serve_command(
    model: str,
    port: int,
    host: str = "127.0.0.1",
    executable: str = "vllm",
    tool_parser: str = DEFAULT_TOOL_PARSER,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The ``vllm serve`` command line for ``model`` with tool calling on."""
    return [
        executable, "serve", model,
        "--enable-auto-tool-choice", "--tool-call-parser", tool_parser,
        "--host", host, "--port", str(port),
        *extra_args,
    ]


def _set_parent_death_signal() -> None:  # runs in the child between fork and exec
    """Linux: let the kernel send SIGTERM to the server if toolgym dies (even by SIGKILL)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class VLLMServer:
    """A ``vllm serve`` child process.

    Args:
        model: Model name or path, as ``vllm serve`` takes it (also the served model name).
        extra_args: Options passed through to ``vllm serve`` (``--tensor-parallel-size 2``, ...).
        port: Port (default: a free one). The host is always 127.0.0.1.
        executable: The ``vllm`` program (looked up on ``PATH``).
        ready_timeout_s: Seconds to wait for ``/v1/models`` before giving up.
        log_path: File receiving the server's stdout and stderr (default: a temporary file).

    Attributes:
        base_url: ``http://127.0.0.1:PORT/v1`` (the OpenAI-compatible endpoint).
    """

    def __init__(
        self,
        model: str,
        extra_args: Sequence[str] = (),
        port: int | None = None,
        executable: str = "vllm",
        ready_timeout_s: float = 900.0,
        log_path: Path | None = None,
    ) -> None:
        self.model = model
        self.extra_args = list(extra_args)
        self.port = port or free_port()
        self.executable = executable
        self.ready_timeout_s = ready_timeout_s
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        """The command line that :meth:`start` runs."""
        return serve_command(self.model, self.port, executable=self.executable, extra_args=self.extra_args)

    def start(self) -> None:
        """Start the server and wait until it answers.

        Raises:
            ServeError: if ``vllm`` is not on ``PATH``, exits before it is ready (its last
                output lines are included), or is not ready within ``ready_timeout_s``.
        """
        program = shutil.which(self.executable)
        if program is None:
            raise ServeError(
                f"{self.executable!r} is not on PATH: pip install -e '.[vllm]' in the toolgym checkout (needs a GPU), "
                "or start a server yourself and pass --base-url"
            )
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="toolgym-vllm-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [program, *self.command()[1:]],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: Ctrl-C reaches it through us only
            preexec_fn=_set_parent_death_signal if sys.platform.startswith("linux") else None,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        url = f"{self.base_url}/models"
        while True:
            code = self.process.poll()
            if code is not None:
                raise ServeError(f"vllm serve exited with status {code} before it was ready:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        json.loads(response.read() or b"{}")
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ServeError(
                    f"vllm serve did not answer {url} within {self.ready_timeout_s:g} s:\n{self.tail()}"
                )
            time.sleep(0.2)

    def tail(self, lines: int = 20) -> str:
        """The last lines of the server's output."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after ``grace_s``."""
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if process is not None:  # the group may outlive its leader (engine workers)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> VLLMServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while the server runs, so cleanup happens."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def serving(server: VLLMServer) -> Iterator[VLLMServer]:
    """Start ``server``, yield it, and stop it however the block ends."""
    with _sigterm_as_interrupt():
        try:
            server.start()
            yield server
        finally:
            server.stop()
