"""A fork server: the tests that run many ``gaugelab`` commands pay for ``import torch`` once.

A command started as a process spends about two seconds of CPU importing torch, matplotlib,
typer and the package before it does anything; the documentation pages and the golden files
run about a hundred of them. The server imports all that once, then forks a child per command:
the child takes the caller's standard streams (passed over a Unix socket), working folder,
environment and arguments, runs the console script's ``main()`` (or a script, as ``python
script.py`` would) and exits with its status. A forked child shares nothing writable with the
server or with another command.

A child does not import again, so what the libraries read from the environment at import
(``ATEN_CPU_CAPABILITY``, ``OMP_NUM_THREADS``) comes from the server's environment, the test
worker's, not from the command's: a command that sets such a variable needs a process of its
own. The server runs no torch operation before it forks (a used OpenMP pool does not survive
``fork``). The tests of start-up itself (``--help`` without torch, signals, process trees, the
console script) start real processes.

    python tests/support/forkserver.py serve SOCKET PID     the server, while process PID lives
    python -S tests/support/forkserver.py gaugelab ARGS...  one command, sent to the server
    python -S tests/support/forkserver.py script FILE       ``python FILE``, sent to the server

The client finds the server's socket in ``$GAUGELAB_FORKSERVER``.

The client imports only the standard library (``-S``: no site-packages), so it starts in a few
milliseconds.
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
from pathlib import Path

ADDRESS = "GAUGELAB_FORKSERVER"
"""The environment variable that carries the server's socket path to the client."""
CLIENT = [sys.executable, "-S", str(Path(__file__).resolve())]
"""The client's command line, before ``gaugelab ARGS...`` or ``script FILE``."""


@contextlib.contextmanager
def started(folder: Path):
    """A server listening in ``folder`` (its log: ``folder/server.log``); yields the environment
    a client needs (``{ADDRESS: socket path}``). On exit the server ends and kills a command
    still running (its own children; a command's pool or Ray workers end with the command)."""
    # a Unix socket's path has room for about 100 bytes: a deep folder gets a short one
    short = None if len(str(folder)) < 90 else Path(tempfile.mkdtemp(prefix="gaugelab-"))
    path = (short or folder) / "socket"
    with open(folder / "server.log", "w") as log:
        server = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "serve", str(path), str(os.getpid())],
            stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip
    try:
        if server.stdout.readline().strip() != "ready":
            log = (folder / "server.log").read_text()
            raise RuntimeError(f"the fork server did not start: {log}")
        yield {ADDRESS: str(path)}
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stdout.close()
        if short is not None:
            shutil.rmtree(short, ignore_errors=True)


def client(kind: str, argv: list[str]) -> int:
    """Send one command (``kind`` ``gaugelab`` or ``script``) to the server; its exit status."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(os.environ[ADDRESS])
        socket.send_fds(sock, [b"\0"], [0, 1, 2])
        request = {"kind": kind, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
        sock.sendall(json.dumps(request).encode() + b"\n")
        reply = sock.makefile("rb").readline()
    if not reply.strip():
        print("forkserver: the command ended without an exit status (killed?)", file=sys.stderr)
        return 1
    return int(reply)


def _exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _child(conn: socket.socket, fds: list[int], request: dict) -> None:
    """Run one command in this forked child; never returns."""
    import atexit
    import runpy
    import traceback

    status = 1
    try:
        conn.settimeout(None)
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for name in ("SIGCHLD", "SIGTERM", "SIGPIPE"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        argv = request["argv"]
        try:
            if request["kind"] == "script":
                sys.argv = list(argv)
                sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
                runpy.run_path(argv[0], run_name="__main__")
            else:
                from gaugelab.cli import main

                sys.argv = [os.path.join(os.path.dirname(sys.executable), "gaugelab"), *argv]
                sys.path[0] = os.path.dirname(sys.argv[0])  # as the console script has it
                main()
            status = 0
        except SystemExit as exc:
            status = _exit_status(exc)
        except BaseException:  # as Python reports an uncaught exception
            traceback.print_exc()
            status = 1
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        conn.sendall(f"{status}\n".encode())
    finally:
        os._exit(status)


def serve(path: str, owner: int) -> None:
    """Import the heavy modules, then fork a child per request until SIGTERM or until process
    ``owner`` (the test worker) is gone."""
    import matplotlib.backends.backend_agg
    import matplotlib.figure
    import torch

    import gaugelab.cli.app
    import gaugelab.experiments

    del matplotlib, torch, gaugelab  # imported for the children

    children: set[int] = set()

    def stop(*_):
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(0)

    def reap() -> None:
        while children:
            done, _ = os.waitpid(-1, os.WNOHANG)
            if done == 0:
                return
            children.discard(done)

    def owner_alive() -> bool:
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            return False
        return True

    signal.signal(signal.SIGTERM, stop)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(16)
        server.settimeout(1.0)
        print("ready", flush=True)
        while True:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                reap()
                if not owner_alive():  # the test worker is gone: so is its server
                    stop()
                continue
            conn.settimeout(30)  # a client that connects and sends nothing
            try:
                _, fds, _, _ = socket.recv_fds(conn, 1, 3)
                request = json.loads(conn.makefile("rb").readline())
            except (OSError, ValueError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                server.close()
                _child(conn, fds, request)
            children.add(pid)
            conn.close()
            for fd in fds:
                os.close(fd)
            reap()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(client(sys.argv[1], sys.argv[2:]))
