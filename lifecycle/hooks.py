"""Hooks: executables in the project's `hooks/`, run as `hooks/<name> <event>` with JSON on stdin.

What a hook declares (`lifecycle: observing`, `engine-env`, `asks` / `acts`) and why is
hooks/README.md's. `on-exit` runs however the step ends, Ctrl-C and SIGTERM included: that is
the job `hook_session` keeps. The context is written verbatim, so callers pass secrets by name.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from types import FrameType
from typing import Any

from lifecycle.errors import LifecycleError, did_you_mean, path_fault, quoted

EVENTS = ("pre-boot", "post-boot", "pre-teardown", "post-teardown", "on-exit")
STEPS = ("boot", "teardown")
OBSERVING_MARKER = "lifecycle: observing"
MARKER_LINES = 20
DEFAULT_TIMEOUT_S = 300.0
KILL_GRACE_S = 5.0
# Once the hook exited, what its children still write is read this long, then no longer.
OUTPUT_AFTER_EXIT_S = 0.2
EXIT_POLL_S = 0.05  # how often a hook whose output is still open is checked for its exit
TAIL_LINES = 20
TAIL_CHARS = 4000
# What is kept of a hook's stdout and stderr while it runs: its readers take at most the last
# TAIL_CHARS characters (a HookRun's tails, production's 600), so the last bytes are enough,
# with room for TAIL_CHARS of 4-byte characters and for redaction, which reads whole secrets.
# A hook stuck in a loop printing would otherwise take lifecycle's memory with it, and a night
# runs many in one process.
OUTPUT_TAIL_BYTES = 64 * 1024
# Starts the line shown before a tail of a hook's output when its beginning is missing, as
# `[lifecycle: log cut: …]` does in a boot's log: what a reader sees is not all it said.
CUT = "[lifecycle: output cut:"

# A comment in sh, Python, Perl, Ruby (#), or JavaScript, Go, Rust (//), or Lua, SQL (--),
# holding `lifecycle: WORD` and what follows it.
_MARKER_LINE = re.compile(r"^\s*(?:#|//|--).*?\blifecycle: ([a-z-]+)(.*)$")
_ENGINE_ENV = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)=(\S*)\s*$")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class Hook:
    """One executable under hooks/, and whether it declares that it changes what it watches."""

    name: str
    path: Path  # resolved: a hook linked into hooks/ runs as the file it points to
    observing: bool
    acts: bool = True  # False only for a hook that declares it only asks
    engine_env: tuple[tuple[str, str], ...] = ()  # what it sets in the engine's environment


@dataclass(frozen=True)
class HookRun:
    """One hook run at one event; `exit_code` is None when it timed out and was killed."""

    name: str
    event: str
    exit_code: int | None
    duration_s: float
    stdout_tail: str
    stderr_tail: str

    @property
    def ok(self) -> bool:
        """Exited 0."""
        return self.exit_code == 0

    @property
    def timed_out(self) -> bool:
        """Killed for running past its timeout."""
        return self.exit_code is None


@dataclass(frozen=True)
class HookExit:
    """What the runner saw of one hook process; `rc` is None when it was killed for time."""

    rc: int | None
    out: str
    err: str
    left_running: int = 0  # processes of its group still running after it exited, stopped
    out_left_out: int = 0  # bytes of stdout not kept (see OUTPUT_TAIL_BYTES, `document_bytes`)
    err_left_out: int = 0  # bytes of stderr not kept: its beginning


# (argv, stdin text, cwd, timeout in seconds) -> HookExit; tests may inject a fake one.
HookRunner = Callable[[Sequence[str], str, Path, float], HookExit]


class HookFailed(LifecycleError):
    """A pre-* hook failed or timed out, so the step was not taken."""

    exit_code = 1

    def __init__(self, run: HookRun) -> None:
        self.run = run
        how = (
            f"timed out after {run.duration_s:.0f} s and was killed"
            if run.timed_out
            else f"exited {run.exit_code}"
        )
        lines = [f"hook {run.name!r} {how} on {run.event}; the step was not taken"]
        lines += [f"  {line}" for line in run.stderr_tail.splitlines()]
        super().__init__("\n".join(lines))

    def lines(self) -> list[str]:
        return str(self).splitlines()


class HookSelectionError(LifecycleError):
    """A hook name that is not an executable under hooks/; lists what is there."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during a hook session, raised so that every `finally` runs.

    A KeyboardInterrupt, so `except Exception` in the step cannot swallow it.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


def discover(hooks_dir: Path) -> dict[str, Hook]:
    """Executable files in `hooks_dir` by name; dotfiles, README*, *.md and the rest are not."""
    if not hooks_dir.is_dir():
        return {}
    return {
        path.name: _declared(path)
        for path in sorted(hooks_dir.iterdir())
        if _looks_like_hook(path) and os.access(path, os.X_OK)
    }


def select(hooks_dir: Path, names: Sequence[str]) -> list[Hook]:
    """The named hooks in the order given; an unknown or non-executable name is refused."""
    available = discover(hooks_dir)
    wanted = list(dict.fromkeys(names))
    problems = [_why_not(hooks_dir, name, available) for name in wanted if name not in available]
    if problems:
        raise HookSelectionError("\n".join(problems))
    return [available[name] for name in wanted]


def instrumented(hooks: Sequence[Hook]) -> bool:
    """Whether a step with these hooks attached ran with an observer that changes timing."""
    return any(hook.observing for hook in hooks)


def engine_env(hooks: Sequence[Hook]) -> dict[str, str]:
    """What the hooks set in the engine's environment; two hooks setting one name differently
    cannot both be attached."""
    env: dict[str, str] = {}
    for hook in hooks:
        for name, value in hook.engine_env:
            if env.get(name, value) != value:
                raise HookSelectionError(
                    f"hooks set {name} in the engine's environment to different values"
                    f" ({env[name]!r}, and {value!r} by {hook.name!r}); attach one of them"
                )
            env[name] = value
    return env


def _looks_like_hook(path: Path) -> bool:
    name = path.name
    ignored = name.startswith(".") or name.startswith("README") or name.endswith(".md")
    return not ignored and path.is_file()


def _declared(path: Path) -> Hook:
    """The hook at `path` with what its first MARKER_LINES lines declare."""
    with path.open("rb") as file:
        head = file.read(64 * 1024).decode("utf-8", errors="replace")
    words: set[str] = set()
    env: list[tuple[str, str]] = []
    for line in head.splitlines()[:MARKER_LINES]:
        marker = _MARKER_LINE.match(line)
        if marker is None:
            continue
        words.add(marker[1])
        setting = _ENGINE_ENV.match(marker[2]) if marker[1] == "engine-env" else None
        if setting:
            env.append((setting[1], setting[2]))
    asks_only = "asks" in words and "acts" not in words
    return Hook(path.name, path.resolve(), "observing" in words, not asks_only, tuple(env))


def _why_not(hooks_dir: Path, name: str, available: Mapping[str, Hook]) -> str:
    path = hooks_dir / name
    fault = path_fault(path)  # a name longer than a file's may be: no file to look at
    if not fault and _looks_like_hook(path) and path.parent == hooks_dir:
        return f"hook {quoted(name)}: {path} is not executable (chmod +x {path})"
    if not hooks_dir.is_dir():
        return f"unknown hook {quoted(name)}: there is no hooks directory at {hooks_dir}"
    if not available:
        return f"unknown hook {quoted(name)}: {hooks_dir} holds no executable hooks"
    hint = did_you_mean(name, available)
    return f"unknown hook {quoted(name)}{hint} (in {hooks_dir}: {', '.join(available)})"


def run_hook_process(
    argv: Sequence[str],
    stdin: str,
    cwd: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    *,
    reap: bool = False,
    document_bytes: int = 0,
) -> HookExit:
    """Run a hook (or an acceptance: `env` its whole environment) in its own process group: a
    timeout kills everything it started.

    The outcome is the hook's own exit within `timeout_s`, not the end of its output: a hook
    that starts a service in the background and exits 0 has succeeded, and the service (which
    still holds the hook's stdout and stderr) lives on; with `reap` (an acceptance, which only
    measures), what it left running in its group is stopped once it exits. Its own session
    also keeps the terminal's Ctrl-C away from it: the interrupt is ours to handle, and an
    on-exit hook restoring production must not be cut short by it.

    Of stdout and stderr only the last OUTPUT_TAIL_BYTES are kept, however much it prints;
    with `document_bytes` (an acceptance, whose stdout is its result document) stdout's first
    `document_bytes` instead. `out_left_out` and `err_left_out` count what was not kept.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    except OSError as exc:
        return HookExit(126 if isinstance(exc, PermissionError) else 127, "", str(exc))
    pipes = _HookPipes(proc, stdin.encode(), document_bytes)
    try:
        if pipes.pump_until_exit(time.monotonic() + timeout_s) is None:
            _stop(proc, pipes)
            return pipes.exit(None)
        left = _stop_what_it_left(proc, pipes) if reap else 0
        pipes.pump_until_eof(time.monotonic() + OUTPUT_AFTER_EXIT_S)
    except BaseException:  # interrupted: leave nothing of a running hook behind us
        if proc.returncode is None:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        raise
    finally:
        pipes.close()
    return pipes.exit(proc.returncode, left)


class _Kept:
    """One stream of a hook's output as kept: its first `head` bytes and its last `tail`
    bytes; `left_out` counts the bytes between, read and dropped."""

    def __init__(self, head: int, tail: int) -> None:
        self.caps = (head, tail)
        self.head = bytearray()
        self.tail = bytearray()
        self.left_out = 0

    def add(self, data: bytes) -> None:
        head_cap, tail_cap = self.caps
        room = head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        over = len(self.tail) - tail_cap
        if over > 0:
            del self.tail[:over]  # cheap: a bytearray drops its front in place
            self.left_out += over

    def text(self) -> str:
        return _text(bytes(self.head + self.tail))


class _HookPipes:
    """The hook's stdin, stdout and stderr, pumped without ever blocking on them.

    Waiting for EOF on stdout and stderr, as `communicate` does, would wait for every process
    that inherited them; a background child of the hook may hold them for hours.
    """

    def __init__(
        self, proc: subprocess.Popen[bytes], stdin: bytes, document_bytes: int = 0
    ) -> None:
        assert proc.stdin and proc.stdout and proc.stderr  # all three are pipes
        self.proc = proc
        self.pending = memoryview(stdin)
        out = _Kept(document_bytes, 0) if document_bytes else _Kept(0, OUTPUT_TAIL_BYTES)
        self.kept = {"out": out, "err": _Kept(0, OUTPUT_TAIL_BYTES)}
        self.selector = selectors.DefaultSelector()
        os.set_blocking(proc.stdin.fileno(), False)
        self.selector.register(proc.stdin, selectors.EVENT_WRITE)
        self.selector.register(proc.stdout, selectors.EVENT_READ, "out")
        self.selector.register(proc.stderr, selectors.EVENT_READ, "err")
        if not self.pending:
            self._close_stdin()

    def pump_until_exit(self, deadline: float) -> int | None:
        """The hook's exit code once it exits before `deadline`; None if it has not."""
        while self.proc.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not self.reading():  # nothing left to pump: just wait for the exit
                with suppress(subprocess.TimeoutExpired):
                    self.proc.wait(remaining)
                continue
            self._pump(min(remaining, EXIT_POLL_S))
        return self.proc.returncode

    def pump_until_eof(self, deadline: float) -> None:
        """Read until stdout and stderr end or `deadline`, whichever comes first."""
        self._close_stdin()
        while self.reading() and (remaining := deadline - time.monotonic()) > 0:
            self._pump(remaining)

    def exit(self, rc: int | None, left_running: int = 0) -> HookExit:
        """What was seen of the hook, as kept."""
        out, err = self.kept["out"], self.kept["err"]
        return HookExit(rc, out.text(), err.text(), left_running, out.left_out, err.left_out)

    def close(self) -> None:
        """Stop pumping; a child still writing to the hook's output gets EPIPE from now on."""
        self._close_stdin()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with suppress(KeyError):
                    self.selector.unregister(pipe)
                pipe.close()
        self.selector.close()

    def reading(self) -> bool:
        """Whether stdout or stderr is still open: something of the hook may still write."""
        return any(key.data for key in self.selector.get_map().values())

    def _pump(self, timeout_s: float) -> None:
        for key, _ in self.selector.select(timeout_s):
            if key.data is None:
                self._write_stdin()
                continue
            data = os.read(key.fd, 64 * 1024)
            if data:
                self.kept[key.data].add(data)
            else:  # EOF: nothing holds this pipe any more
                self.selector.unregister(key.fileobj)

    def _write_stdin(self) -> None:
        assert self.proc.stdin
        try:
            written = os.write(self.proc.stdin.fileno(), self.pending)
        except BlockingIOError:
            return
        except BrokenPipeError:  # a hook need not read its context
            written = len(self.pending)
        self.pending = self.pending[written:]
        if not self.pending:
            self._close_stdin()

    def _close_stdin(self) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        with suppress(KeyError):
            self.selector.unregister(stdin)
        with suppress(BrokenPipeError):
            stdin.close()


def _stop(proc: subprocess.Popen[bytes], pipes: _HookPipes) -> None:
    """SIGTERM the group, SIGKILL it after a grace period, keeping whatever output there was.

    The grace ends early once the hook has exited and nothing holds its output any more, i.e.
    what it started has gone too.
    """
    _signal_group(proc, signal.SIGTERM)
    if pipes.pump_until_exit(time.monotonic() + KILL_GRACE_S) is not None:
        pipes.pump_until_eof(time.monotonic() + KILL_GRACE_S)
    if proc.returncode is None or pipes.reading():
        _signal_group(proc, signal.SIGKILL)
    if pipes.pump_until_exit(time.monotonic() + KILL_GRACE_S) is None:
        proc.kill()  # left its group; it is ours to end all the same
        proc.wait()
    # a grandchild that daemonized into a session of its own may hold the pipes: not waited for
    pipes.pump_until_eof(time.monotonic() + OUTPUT_AFTER_EXIT_S)


def _stop_what_it_left(proc: subprocess.Popen[bytes], pipes: _HookPipes) -> int:
    """SIGTERM what is still running in the exited process's group, SIGKILL it after the
    grace; how many processes were left. (A child that made a session of its own is out of
    reach, as it is of a timeout.)"""
    left = len(_running_in_group(proc.pid))
    for signum in (signal.SIGTERM, signal.SIGKILL) if left else ():
        _signal_group(proc, signum)
        deadline = time.monotonic() + KILL_GRACE_S
        while (still := _running_in_group(proc.pid)) and time.monotonic() < deadline:
            if pipes.reading():  # keep reading what they say as they go
                pipes.pump_until_eof(time.monotonic() + EXIT_POLL_S)
            else:
                time.sleep(EXIT_POLL_S)
        if not still:
            break
    return left


def _running_in_group(pgid: int) -> list[int]:
    """The processes of group `pgid` that have not ended. Not `killpg(pgid, 0)`: it finds
    the zombies too, which stay until whoever adopted them reaps them (if ever, in a
    container whose first process does not)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # ended while we looked
            continue
        state, _ppid, group = stat.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgid and state != "Z":
            found.append(int(entry.name))
    return found


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with suppress(ProcessLookupError):  # the whole group has already gone
        os.killpg(proc.pid, signum)


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def _payload(context: Mapping[str, Any]) -> str:
    """The context as JSON; paths become strings, anything else unknown is a caller's bug."""

    def path_text(value: object) -> str:
        if isinstance(value, PurePath):
            return str(value)
        raise TypeError(f"hook context value {value!r} is not JSON")

    return json.dumps(context, default=path_text)


def tail(text: str, left_out: int, chars: int = TAIL_CHARS, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a hook's output as kept, at most `chars` characters of them;
    first a CUT line when anything before them is missing: the `left_out` bytes the runner
    did not keep (HookExit), and what this leaves out of `text`."""
    end = "".join(text.splitlines(keepends=True)[-lines:])[-chars:]  # a suffix of `text`
    missing = left_out + len(text.encode()) - len(end.encode())
    shown = "\n".join(end.splitlines())
    return f"{CUT} {missing} bytes left out before these lines]\n{shown}" if missing else shown


@dataclass
class HookSession:
    """The hooks attached to one step, and every run of them; made by `hook_session`."""

    hooks: Sequence[Hook]
    step: str
    context: dict[str, Any]
    runner: HookRunner
    cwd: Path
    timeout_s: float
    runs: list[HookRun] = field(default_factory=list)

    def fire(self, event: str, extra_context: Mapping[str, Any] | None = None) -> list[HookRun]:
        """Run `event` on every hook in order; a failing pre-* hook raises HookFailed.

        `extra_context` joins the session's context for this and every later event, so
        on-exit sees what the step learned (a container id, say).
        """
        if event not in EVENTS or event == "on-exit":
            raise ValueError(f"cannot fire {event!r}: on-exit is run by hook_session")
        self.context.update(extra_context or {})
        runs = []
        for hook in self.hooks:
            run = self._run(hook, event, self.context)
            runs.append(run)
            if event.startswith("pre-") and not run.ok:
                raise HookFailed(run)
        return runs

    def _run(self, hook: Hook, event: str, context: Mapping[str, Any]) -> HookRun:
        payload = _payload({**context, "event": event, "step": self.step})
        started = time.monotonic()
        done = self.runner([str(hook.path), event], payload, self.cwd, self.timeout_s)
        run = HookRun(
            name=hook.name,
            event=event,
            exit_code=done.rc,
            duration_s=round(time.monotonic() - started, 3),
            stdout_tail=tail(done.out, done.out_left_out),
            stderr_tail=tail(done.err, done.err_left_out),
        )
        self.runs.append(run)
        return run


@contextmanager
def hook_session(
    hooks: Sequence[Hook],
    step: str,
    context: Mapping[str, Any],
    runner: HookRunner = run_hook_process,
    *,
    cwd: Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Iterator[HookSession]:
    """Attach `hooks` to a step; however the block is left, run their on-exit, then re-raise.

    The first SIGINT or SIGTERM raises Interrupted in the block (outcome "interrupted"); later
    ones are held until on-exit is done. `cwd` defaults to the hooks directory's parent.
    """
    if step not in STEPS:
        raise ValueError(f"unknown step {step!r}; expected one of {', '.join(STEPS)}")
    _payload(context)  # an unserialisable context is refused before any hook runs
    root = cwd or (hooks[0].path.parent.parent if hooks else Path.cwd())
    session = HookSession(tuple(hooks), step, dict(context), runner, root, timeout_s)

    def on_exit(outcome: str, error: str | None) -> None:
        context = {**session.context, "outcome": outcome, "error": error}
        for hook in session.hooks:  # each one runs; a failure is recorded, never raised
            session._run(hook, "on-exit", context)

    with always(on_exit):
        yield session


@contextmanager
def always(cleanup: Callable[[str, str | None], object]) -> Iterator[None]:
    """Run the block, then `cleanup(outcome, error)` however it was left (outcome ok, failed or
    interrupted), then re-raise.

    The first SIGINT or SIGTERM raises Interrupted in the block; later ones wait until the
    cleanup is done, then the first of them is raised: a second Ctrl-C must not cut short the
    cleanup it started, nor the on-exit hook that brings production back. Signals the process
    was told to ignore stay ignored, and off the main thread, where Python cannot install
    handlers, the block runs without them.
    """
    holding = False
    held: list[int] = []  # signals that came while holding
    previous: dict[signal.Signals, Any] = {}  # the handlers to put back

    def handle(signum: int, _frame: FrameType | None) -> None:
        nonlocal holding
        if holding:
            held.append(signum)
            return
        holding = True
        raise Interrupted(signum)

    if threading.current_thread() is threading.main_thread():
        for signum in _SIGNALS:
            current = signal.getsignal(signum)
            if current is signal.SIG_IGN:  # e.g. a background job of a non-interactive shell
                continue
            previous[signum] = signal.SIG_DFL if current is None else current
            signal.signal(signum, handle)
    outcome, error = "ok", None
    try:
        yield
    except KeyboardInterrupt as exc:
        outcome, error = "interrupted", str(exc) or "interrupted by SIGINT"
        raise
    except BaseException as exc:
        outcome, error = "failed", str(exc) or type(exc).__name__
        raise
    finally:
        holding = True  # first thing: from here on a signal waits for the cleanup
        try:
            cleanup(outcome, error)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if held and outcome != "interrupted":
            raise Interrupted(held[0])
