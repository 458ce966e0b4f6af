"""Test programs as forks of one process that has imported the libraries already.

A test program (`python -m tests.support.hitl_workers ...`) spends most of its start importing
LangChain, LangGraph and the adapters: about 3 s of CPU, paid again by every worker a test
starts. Here one process, started once per test session, imports them and then forks a child
for each program: `runpy.run_module` runs the program as `python -m` would, in a real OS process
of its own (its own pid, pipes, environment and working folder; SIGKILL kills it alone).

Protocol (a Unix socket per child): the test sends one JSON line (module, arguments,
environment, folder) with the child's stdin (/dev/null), stdout and stderr attached (SCM_RIGHTS);
the fork server answers `{"pid": N}` and, when the child ends, `{"status": S}` (S as
`asyncio.subprocess.Process.returncode`: negative for a signal).

`SIGNOFF_TEST_FORKS=0` starts every program with `python -m` instead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import random
import runpy
import selectors
import signal
import socket
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

__all__ = ["ForkedProcess", "fork_program", "forks_enabled", "stop_fork_server"]

_PRELOAD = (
    "asyncpg",
    "cryptography.hazmat.primitives.ciphers.aead",
    "ledger.store.migrate",
    "approvals",
    "adapters.cli",
    "adapters.langgraph",
    "adapters.demo",
    "adapters.dex",
    "adapters.welt",
    "langchain.agents",
    "langchain_core.language_models.fake_chat_models",
    "langgraph.graph",
)


def forks_enabled() -> bool:
    return os.environ.get("SIGNOFF_TEST_FORKS", "1") != "0"


# -- the fork server ---------------------------------------------------------------------------


def _serve(path: str) -> None:
    """Import the libraries, then fork a child per request until stdin closes."""
    import importlib

    for name in _PRELOAD:
        with contextlib.suppress(ImportError):  # an extra that is not installed
            importlib.import_module(name)
    from ledger.store import migrate

    migrate.head_revision()  # reads the migration scripts once, for every child
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up fd is what matters
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_read, selectors.EVENT_READ, "child")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "stop")
    print("ready", flush=True)
    try:
        while True:
            for key, _ in selector.select():
                if key.data == "stop":
                    return
                if key.data == "child":
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_read, 4096)
                    _reap(children)
                    continue
                connection, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(connection, 65536, 3)
                while not message.endswith(b"\n"):  # the rest of a long environment
                    message += connection.recv(65536)
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:  # the child: nothing of the server survives but the imports
                    selector.close()
                    listener.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_read)
                    os.close(wake_write)
                    for other in children.values():
                        other.close()
                    connection.close()
                    _run_child(request, fds)
                for fd in fds:
                    os.close(fd)
                connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                children[pid] = connection
                _reap(children)  # a child that ended before it was registered
    finally:
        for pid, connection in children.items():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            connection.close()


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                connection.sendall(json.dumps({"status": code}).encode() + b"\n")
            connection.close()


def _run_child(request: dict[str, Any], fds: list[int]) -> None:
    """Become the program: its pipes, environment and folder, then `python -m` it."""
    code = 0
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        random.seed()  # not the server's sequence
        sys.argv = [request["module"], *request["args"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


# -- the test's side ---------------------------------------------------------------------------


class ForkedProcess:
    """What a test uses of `asyncio.subprocess.Process`, for a forked program."""

    stdin = None  # a program reads no input: its stdin is /dev/null, as the test's would be

    def __init__(
        self,
        pid: int,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        status: asyncio.StreamReader,
        closing: asyncio.StreamWriter,
    ) -> None:
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._ended = asyncio.create_task(self._status(status, closing))

    async def _status(self, status: asyncio.StreamReader, closing: asyncio.StreamWriter) -> None:
        line = await status.readline()
        closing.close()
        self.returncode = json.loads(line)["status"] if line else -signal.SIGKILL

    async def wait(self) -> int:
        await asyncio.shield(self._ended)
        assert self.returncode is not None
        return self.returncode

    async def communicate(self) -> tuple[bytes, bytes]:
        stdout, stderr = await asyncio.gather(self.stdout.read(), self.stderr.read())
        await self.wait()
        return stdout, stderr

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


_server: asyncio.subprocess.Process | None = None
_path: str | None = None


async def _start_server(root: Path) -> str:
    global _server, _path
    if _server is not None and _server.returncode is None and _path is not None:
        return _path
    path = os.path.join(tempfile.mkdtemp(prefix="signoff-forks-"), "socket")
    _server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.forks",
        path,
        cwd=root,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert _server.stdout is not None
    ready = await asyncio.wait_for(_server.stdout.readline(), 120)
    if ready.strip() != b"ready":
        raise RuntimeError(f"the test programs' fork server did not start: {ready!r}")
    _path = path
    return path


async def fork_program(
    root: Path, module: str, args: tuple[str, ...], env: dict[str, str]
) -> ForkedProcess:
    """`python -m MODULE ARGS` in `root` with environment `env`, forked from the fork server
    (started on first use)."""
    path = await _start_server(root)
    loop = asyncio.get_running_loop()
    stdin_r = os.open(os.devnull, os.O_RDONLY)
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, path)
        sock.setblocking(True)
        request = {"module": module, "args": list(args), "env": env, "cwd": str(root)}
        message = json.dumps(request).encode() + b"\n"
        socket.send_fds(sock, [message], [stdin_r, stdout_w, stderr_w])
    except BaseException:
        sock.close()
        for fd in (stdin_r, stdout_r, stdout_w, stderr_r, stderr_w):
            os.close(fd)
        raise
    for fd in (stdin_r, stdout_w, stderr_w):
        os.close(fd)
    sock.setblocking(False)
    status, closing = await asyncio.open_unix_connection(sock=sock)
    pid = json.loads(await status.readline())["pid"]
    stdout = await _reader(loop, stdout_r)
    stderr = await _reader(loop, stderr_r)
    return ForkedProcess(pid, stdout, stderr, status, closing)


async def _reader(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=2**20)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0)
    )
    return reader


async def stop_fork_server() -> None:
    """Stop the fork server (its running children are killed)."""
    global _server
    if _server is None:
        return
    server, _server = _server, None
    assert server.stdin is not None
    server.stdin.close()
    try:
        await asyncio.wait_for(server.wait(), 10)
    except TimeoutError:
        server.kill()
        await server.wait()


if __name__ == "__main__":
    _serve(sys.argv[1])
