"""Servers that stop answering, and commands run side by side against them, for the tests of
lifecycle's time limits: a listener that accepts every connection and never says a word, a
relay to the real S3 server (or dockerd) that falls silent at a request of the test's choosing,
the way a server does when it is stopped (SIGSTOP) in the middle of a command, an S3
server that answers every request 503 SlowDown, and a git daemon that falls silent mid-answer."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.trust_support import lifecycle_argv


@dataclass(frozen=True)
class Ran:
    """One command run to its end: its argv, exit code, output and wall time."""

    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    seconds: float

    def __str__(self) -> str:
        return f"lifecycle {' '.join(self.argv)}: rc {self.rc} after {self.seconds:.1f} s\n" + (
            f"{self.stdout}\n{self.stderr}"
        )


class SilentRelay:
    """`127.0.0.1:PORT` relaying to `upstream` (HOST, PORT, or a unix socket's path: dockerd's)
    until a request whose first line matches
    `freeze_at` (a regex, or None: from the start) arrives. From then on nothing more is
    relayed either way, every connection is held open unread, and new ones are accepted and
    never answered. With `trickle` (seconds), it relays on instead, but every answer after its
    first KiB (the head of a response) one byte per `trickle` seconds: a server that never
    stops answering, and never finishes."""

    def __init__(
        self,
        upstream: tuple[str, int] | str | None,
        freeze_at: str | None,
        trickle: float | None = None,
        greeting: bytes = b"",
    ) -> None:
        self.upstream = upstream
        self.greeting = greeting
        self.trickle = trickle
        self.freeze_at = re.compile(freeze_at.encode()) if freeze_at else None
        self.frozen = threading.Event()
        if upstream is None or freeze_at is None:
            self.frozen.set()
        self.stop = threading.Event()
        self.relayed: list[bytes] = []  # the first line of every request relayed
        self.server = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        """`127.0.0.1:PORT`."""
        return f"127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        """The URL lifecycle is given as AWS_ENDPOINT_URL."""
        return f"http://{self.address}"

    def _accept(self) -> None:
        for client in _accepted(self.server, self.stop, self.held):
            if self.upstream is None or (self.frozen.is_set() and self.trickle is None):
                client.sendall(self.greeting)
                continue  # accepted, never read, never answered (but for the greeting)
            upstream = _connect(self.upstream)
            self.held.append(upstream)
            for source, sink, asks in ((client, upstream, True), (upstream, client, False)):
                pump = threading.Thread(target=self._pump, args=(source, sink, asks), daemon=True)
                pump.start()

    def _pump(self, source: socket.socket, sink: socket.socket, asks: bool) -> None:
        sent = 0  # bytes of answers sent on this connection since it began to trickle
        while not self.stop.is_set():
            try:
                data = source.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            if asks and self.freeze_at and re.match(rb"^[A-Z]+ /", data):
                line = data.split(b"\r\n", 1)[0]
                if self.freeze_at.search(line):
                    self.frozen.set()
                elif not self.frozen.is_set():
                    self.relayed.append(line)
            if self.frozen.is_set() and self.trickle is None:
                self.stop.wait()  # held: neither read nor answered any more
                return
            if self.frozen.is_set() and not asks:
                sent = self._dribble(sink, data, sent)
                continue
            try:
                sink.sendall(data)
            except OSError:
                return

    def _dribble(self, sink: socket.socket, data: bytes, sent: int) -> int:
        """Send `data`: what is left of the first KiB at once, the rest a byte at a time."""
        assert self.trickle is not None
        for at in range(len(data)):
            if self.stop.is_set():
                break
            if sent + at >= 1024:
                self.stop.wait(self.trickle)
            try:
                sink.sendall(data[at : at + 1])
            except OSError:
                break
        return sent + len(data)

    def close(self) -> None:
        """Let go of every connection."""
        _let_go(self.stop, self.server, self.thread, self.held)


class StallingGitDaemon:
    """`git://127.0.0.1:PORT/NAME` serving the bare repositories under `root` (`git daemon
    --inetd` per connection), whose answers stop for good once they have held `stall_after`
    (b"": before the first byte; b"PACK": a valid advertisement, and 96 KiB of the pack),
    while `stalling` is set: the connection is held open, nothing more is sent or read."""

    def __init__(self, root: Path, stall_after: bytes) -> None:
        self.root = root
        self.stall_after = stall_after
        self.stalling = threading.Event()
        self.stalling.set()
        self.stop = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        self.daemons: list[subprocess.Popen[bytes]] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        """The git:// URL of the repository `root/name`."""
        return f"git://127.0.0.1:{self.port}/{name}"

    def _accept(self) -> None:
        for client in _accepted(self.server, self.stop, self.held):
            daemon = subprocess.Popen(
                ["git", "daemon", "--inetd", "--export-all", f"--base-path={self.root}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            self.daemons.append(daemon)
            stalls = self.stalling.is_set()
            threading.Thread(target=self._ask, args=(client, daemon), daemon=True).start()
            threading.Thread(
                target=self._answer, args=(daemon, client, stalls), daemon=True
            ).start()

    def _ask(self, client: socket.socket, daemon: subprocess.Popen[bytes]) -> None:
        assert daemon.stdin is not None
        try:
            while data := client.recv(1 << 16):
                daemon.stdin.write(data)
                daemon.stdin.flush()
            daemon.stdin.close()
        except (OSError, ValueError):
            return

    def _answer(self, daemon: subprocess.Popen[bytes], client: socket.socket, stalls: bool) -> None:
        assert daemon.stdout is not None
        seen = b""
        stop_at: int | None = None  # where in the answer it stops
        try:
            while data := daemon.stdout.read1(1 << 16):
                sent = len(seen)
                seen += data
                if stalls and stop_at is None and (at := seen.find(self.stall_after)) >= 0:
                    # A pack: its first sideband packet (64 KiB) and more, which git has
                    # handed on to index-pack or unpack-objects when the answer stops.
                    stop_at = at + len(self.stall_after) + (96 << 10 if self.stall_after else 0)
                if stop_at is not None and len(seen) >= stop_at:
                    client.sendall(data[: stop_at - sent])
                    self.stop.wait()  # held: nothing more is sent
                    return
                client.sendall(data)
            client.shutdown(socket.SHUT_WR)
        except OSError:
            return

    def close(self) -> None:
        """Let go of every connection and daemon."""
        _let_go(self.stop, self.server, self.thread, self.held)
        for daemon in self.daemons:
            daemon.kill()
            daemon.wait()


@contextmanager
def stalling_git_daemon(root: Path, stall_after: bytes) -> Iterator[StallingGitDaemon]:
    """A StallingGitDaemon on `root`, closed afterwards."""
    daemon = StallingGitDaemon(root, stall_after)
    try:
        yield daemon
    finally:
        daemon.close()


def _accepted(
    server: socket.socket, stop: threading.Event, held: list[socket.socket]
) -> Iterator[socket.socket]:
    """Each connection `server` accepts (held open in `held`) until `stop` or its close."""
    while not stop.is_set():
        try:
            client = server.accept()[0]
        except TimeoutError:
            continue
        except OSError:
            return
        held.append(client)
        yield client


def _let_go(
    stop: threading.Event,
    server: socket.socket,
    thread: threading.Thread,
    held: list[socket.socket],
) -> None:
    """Stop accepting (`thread` runs `_accepted`) and close every connection held."""
    stop.set()
    server.close()
    thread.join()
    for connection in held:
        connection.close()


def _connect(upstream: tuple[str, int] | str) -> socket.socket:
    if isinstance(upstream, tuple):
        return socket.create_connection(upstream)
    connection = socket.socket(socket.AF_UNIX)
    connection.connect(upstream)
    return connection


@contextmanager
def silent_listener(greeting: bytes = b"") -> Iterator[SilentRelay]:
    """A listener that accepts every connection and never says a word, or only `greeting`
    (an ssh server's banner) as it accepts."""
    relay = SilentRelay(None, None, greeting=greeting)
    try:
        yield relay
    finally:
        relay.close()


@contextmanager
def silent_relay(
    upstream_url: str, freeze_at: str, trickle: float | None = None
) -> Iterator[SilentRelay]:
    """A SilentRelay to the server at `upstream_url` (http://HOST:PORT), closed afterwards."""
    host, _, port = upstream_url.removeprefix("http://").rstrip("/").partition(":")
    relay = SilentRelay((host, int(port)), freeze_at, trickle)
    try:
        yield relay
    finally:
        relay.close()


class _SlowDown(BaseHTTPRequestHandler):
    """Answers every request 503 SlowDown, as an S3 server shedding load does."""

    BODY = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
        b"<Message>Please reduce your request rate.</Message></Error>"
    )

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(503)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(self.BODY)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(self.BODY)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving(handler: Callable[..., BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` answering HTTP on a loopback port while in the block: its http://HOST:PORT."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def failing_server() -> AbstractContextManager[str]:
    """The endpoint (http://127.0.0.1:PORT) of an S3 server answering every request 503."""
    return serving(_SlowDown)


def side_by_side(
    project: Path, commands: list[tuple[list[str], dict[str, str]]], at_once: int = 6
) -> list[Ran]:
    """Run the commands (argv, environment added), `at_once` at a time, each as a process of
    its own; what each did, in their order. Each one's wall time is its own, from its start to
    its exit: with more at once, the start-up of each (Python, boto3) on a loaded 2-core machine
    would be most of what is timed."""
    done: dict[int, Ran] = {}

    def one(index: int, argv: list[str], env: dict[str, str]) -> None:
        started = time.monotonic()
        finished = subprocess.run(
            lifecycle_argv(project, *argv),
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        elapsed = time.monotonic() - started
        done[index] = Ran(argv, finished.returncode, finished.stdout, finished.stderr, elapsed)

    for start in range(0, len(commands), at_once):
        threads = [
            threading.Thread(target=one, args=(index, *commands[index]))
            for index in range(start, min(start + at_once, len(commands)))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return [done[index] for index in range(len(commands))]


def assert_failed_within(results: list[Ran], limit: float, endpoint: str, rc: int = 3) -> None:
    """Every command failed (`rc`) within `limit` seconds, its last line naming the endpoint,
    no traceback."""
    for ran in results:
        assert ran.rc == rc, ran
        assert ran.seconds <= limit, ran
        assert "Traceback" not in ran.stderr, ran
        errors = [line for line in ran.stderr.splitlines() if not line.startswith("  | ")]
        assert errors and endpoint in errors[-1], ran
