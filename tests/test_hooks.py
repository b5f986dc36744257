"""Hooks: real executables in tmp dirs, real signals to a real child process, shipped examples."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lifecycle.errors import LifecycleError
from lifecycle.hooks import (
    OBSERVING_MARKER,
    HookExit,
    HookFailed,
    HookSelectionError,
    discover,
    engine_env,
    hook_session,
    instrumented,
    run_hook_process,
    select,
)

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "hooks"

# An on-exit hook that leaves its context in <project root>/on-exit.json.
ON_EXIT_MARKER = '[ "$1" = on-exit ] || exit 0\ncat > on-exit.json\n'


def write_hook(hooks_dir: Path, name: str, body: str, *, mode: int = 0o755) -> Path:
    """A POSIX sh hook under hooks_dir."""
    hooks_dir.mkdir(parents=True, exist_ok=True)
    path = hooks_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(mode)
    return path


def on_exit_context(root: Path) -> dict[str, Any]:
    """What the ON_EXIT_MARKER hook received."""
    context: dict[str, Any] = json.loads((root / "on-exit.json").read_text())
    return context


def running(pid: int) -> bool:
    """Alive and not a zombie waiting for a parent that may never reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_for(path: Path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


# --- discover and select ---------------------------------------------------------------------


def test_discover_takes_executables_and_ignores_the_rest(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    write_hook(hooks, "snapshot", "exit 0\n")
    write_hook(hooks, "draft", "exit 0\n", mode=0o644)
    for name in (".hidden", "README", "README.txt", "notes.md"):
        write_hook(hooks, name, "exit 0\n")
    (hooks / "subdir").mkdir()
    assert list(discover(hooks)) == ["snapshot"]
    assert discover(hooks)["snapshot"].path == (hooks / "snapshot").resolve()
    assert discover(tmp_path / "absent") == {}


def test_select_keeps_the_order_given_once_each(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        write_hook(tmp_path / "hooks", name, "exit 0\n")
    chosen = select(tmp_path / "hooks", ["c", "a", "c"])
    assert [hook.name for hook in chosen] == ["c", "a"]


def test_an_unknown_name_is_refused_with_a_suggestion_and_the_list(tmp_path: Path) -> None:
    write_hook(tmp_path / "hooks", "memory-snapshot", "exit 0\n")
    write_hook(tmp_path / "hooks", "log-event", "exit 0\n")
    with pytest.raises(HookSelectionError) as caught:
        select(tmp_path / "hooks", ["memory-snapshto", "memory-snapshto"])
    assert isinstance(caught.value, LifecycleError)
    assert caught.value.exit_code == 2
    message = str(caught.value)
    assert "unknown hook 'memory-snapshto'; did you mean 'memory-snapshot'?" in message
    assert "log-event, memory-snapshot" in message
    assert message.count("unknown hook") == 1


def test_a_file_that_is_not_executable_is_refused_by_name(tmp_path: Path) -> None:
    write_hook(tmp_path / "hooks", "draft", "exit 0\n", mode=0o644)
    with pytest.raises(HookSelectionError, match=r"is not executable \(chmod \+x .*draft\)"):
        select(tmp_path / "hooks", ["draft"])


def test_names_without_a_hooks_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(HookSelectionError, match="no hooks directory"):
        select(tmp_path / "hooks", ["anything"])
    assert select(tmp_path / "hooks", []) == []


# --- observing --------------------------------------------------------------------------------


def test_the_observing_marker_is_read_from_a_comment_in_the_first_20_lines(
    tmp_path: Path,
) -> None:
    hooks = tmp_path / "hooks"
    write_hook(hooks, "heavy", f"# records history; {OBSERVING_MARKER}\nexit 0\n")
    write_hook(hooks, "late", "\n" * 25 + f"# {OBSERVING_MARKER}\nexit 0\n")
    write_hook(hooks, "says-it", f'echo "{OBSERVING_MARKER}"\nexit 0\n')
    write_hook(hooks, "plain", "exit 0\n")
    found = discover(hooks)
    assert {name for name, hook in found.items() if hook.observing} == {"heavy"}
    assert instrumented([found["plain"], found["heavy"]])
    assert not instrumented([found["plain"], found["late"], found["says-it"]])
    assert not instrumented([])


def test_a_hook_acts_unless_it_declares_it_only_asks(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    write_hook(hooks, "status", "# lifecycle: asks\nsystemctl is-active vllm\n")
    write_hook(hooks, "stop", "# lifecycle: acts\nsystemctl stop vllm\n")
    write_hook(hooks, "silent", "systemctl restart vllm\n")  # says nothing: it acts
    write_hook(hooks, "both", "# lifecycle: asks\n# lifecycle: acts\nexit 0\n")
    write_hook(hooks, "late", "\n" * 25 + "# lifecycle: asks\nexit 0\n")
    found = discover(hooks)
    assert {name for name, hook in found.items() if not hook.acts} == {"status"}


def test_engine_env_is_declared_by_markers_and_two_hooks_may_not_disagree(
    tmp_path: Path,
) -> None:
    hooks = tmp_path / "hooks"
    body = "# lifecycle: observing\n# lifecycle: engine-env RECORD_HISTORY=1\n"
    write_hook(hooks, "recorder", body + "# lifecycle: engine-env TRIGGER=64\nexit 0\n")
    write_hook(hooks, "other", "# lifecycle: engine-env TRIGGER=32\nexit 0\n")
    write_hook(hooks, "same", "# lifecycle: engine-env TRIGGER=64\nexit 0\n")
    found = discover(hooks)
    assert found["recorder"].observing
    assert engine_env([found["recorder"], found["same"]]) == {
        "RECORD_HISTORY": "1",
        "TRIGGER": "64",
    }
    with pytest.raises(HookSelectionError, match="TRIGGER"):
        engine_env([found["recorder"], found["other"]])


# --- running: argv, stdin, cwd, failures, timeouts --------------------------------------------


def test_the_event_is_argv1_and_the_context_json_on_stdin_in_the_project_root(
    tmp_path: Path,
) -> None:
    write_hook(
        tmp_path / "hooks",
        "record",
        '[ "$1" = on-exit ] && exit 0\necho "$1" > argv\ncat > stdin.json\npwd > cwd\n',
    )
    hooks = select(tmp_path / "hooks", ["record"])
    context = {"boot_id": "b1", "evidence_dir": tmp_path / "evidence", "secret_names": ["HF"]}
    with hook_session(hooks, "boot", context) as session:
        runs = session.fire("pre-boot", {"port": 8000})
    assert [(run.name, run.event, run.exit_code) for run in runs] == [("record", "pre-boot", 0)]
    assert (tmp_path / "argv").read_text() == "pre-boot\n"
    assert Path((tmp_path / "cwd").read_text().strip()).resolve() == tmp_path.resolve()
    assert json.loads((tmp_path / "stdin.json").read_text()) == {
        "boot_id": "b1",
        "evidence_dir": str(tmp_path / "evidence"),
        "secret_names": ["HF"],
        "port": 8000,
        "event": "pre-boot",
        "step": "boot",
    }


def test_a_failing_pre_boot_hook_aborts_the_step_naming_itself_and_its_stderr(
    tmp_path: Path,
) -> None:
    write_hook(
        tmp_path / "hooks",
        "gpu-free",
        '[ "$1" = pre-boot ] || exit 0\necho checking\necho "GPU 0 is held by pid 4242" >&2\n'
        "exit 3\n",
    )
    write_hook(tmp_path / "hooks", "marker", ON_EXIT_MARKER)
    hooks = select(tmp_path / "hooks", ["gpu-free", "marker"])
    booted = False
    with pytest.raises(HookFailed) as caught, hook_session(hooks, "boot", {}) as session:
        session.fire("pre-boot")
        booted = True
    assert not booted
    failed = caught.value
    assert failed.exit_code == 1
    assert failed.lines()[0] == "hook 'gpu-free' exited 3 on pre-boot; the step was not taken"
    assert "GPU 0 is held by pid 4242" in str(failed)
    assert failed.run.stdout_tail == "checking"
    # The marker hook's pre-boot never ran; on-exit ran for both, knowing why.
    assert [(run.name, run.event) for run in session.runs] == [
        ("gpu-free", "pre-boot"),
        ("gpu-free", "on-exit"),
        ("marker", "on-exit"),
    ]
    assert on_exit_context(tmp_path)["outcome"] == "failed"
    assert "gpu-free" in on_exit_context(tmp_path)["error"]


def test_a_failing_post_boot_hook_is_reported_not_raised(tmp_path: Path) -> None:
    write_hook(tmp_path / "hooks", "flaky", '[ "$1" = post-boot ] && echo "no disk" >&2\nexit 4\n')
    hooks = select(tmp_path / "hooks", ["flaky"])
    with hook_session(hooks, "boot", {}) as session:
        (run,) = session.fire("post-boot")
    assert (run.exit_code, run.ok, run.timed_out, run.stderr_tail) == (4, False, False, "no disk")


def test_a_hook_past_its_timeout_is_killed_with_what_it_started(tmp_path: Path) -> None:
    write_hook(
        tmp_path / "hooks",
        "stuck",
        '[ "$1" = on-exit ] && exit 0\necho started\nsleep 60 &\necho $! > sleeper.pid\nwait\n',
    )
    hooks = select(tmp_path / "hooks", ["stuck"])
    with hook_session(hooks, "boot", {}, timeout_s=0.5) as session:
        (run,) = session.fire("post-boot")
        assert run.timed_out and run.exit_code is None and not run.ok
        assert 0.5 <= run.duration_s < 10
        assert run.stdout_tail == "started"
        sleeper = int((tmp_path / "sleeper.pid").read_text())
        deadline = time.monotonic() + 5
        while running(sleeper):
            assert time.monotonic() < deadline, "the hook's child outlived the timeout"
            time.sleep(0.05)
        with pytest.raises(HookFailed, match=r"'stuck' timed out after .* and was killed"):
            session.fire("pre-teardown")


def test_a_hook_that_exits_at_once_leaving_a_child_running_succeeds_and_the_child_lives(
    tmp_path: Path,
) -> None:
    # A production-up hook starting a service in the background: the service holds the hook's
    # stdout and stderr, and the outcome is still the hook's own exit, not the pipes' end.
    write_hook(
        tmp_path / "hooks",
        "bg",
        '[ "$1" = pre-boot ] || exit 0\nsleep 30 &\necho $! > sleeper.pid\necho "helper started"\n'
        "exit 0\n",
    )
    hooks = select(tmp_path / "hooks", ["bg"])
    taken = False
    try:
        with hook_session(hooks, "boot", {}, timeout_s=3) as session:
            (run,) = session.fire("pre-boot")
            taken = True
        assert taken and run.ok and not run.timed_out
        assert run.duration_s < 2.5
        assert run.stdout_tail == "helper started"
        assert running(int((tmp_path / "sleeper.pid").read_text()))
    finally:
        pid_file = tmp_path / "sleeper.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_what_a_child_writes_after_the_hook_exited_is_not_waited_for(tmp_path: Path) -> None:
    script = (
        "(while :; do echo tick; echo tock >&2; sleep 0.05; done) &\n"
        "echo $! > writer.pid\necho done\nexit 5\n"
    )
    write_hook(tmp_path / "hooks", "chatty", script)
    started = time.monotonic()
    try:
        done = run_hook_process([str(tmp_path / "hooks" / "chatty")], "{}", tmp_path, 10)
        assert done.rc == 5
        assert time.monotonic() - started < 4  # unfixed, it ran into the 10 s timeout
        assert "done" in done.out.splitlines()  # the child's ticks may come first
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int((tmp_path / "writer.pid").read_text()), signal.SIGKILL)


def test_a_hook_that_never_reads_its_stdin_is_not_waited_on(tmp_path: Path) -> None:
    write_hook(tmp_path / "hooks", "deaf", "sleep 0.2\necho ignored stdin\n")
    big = json.dumps({"blob": "x" * 1_000_000})
    done = run_hook_process([str(tmp_path / "hooks" / "deaf")], big, tmp_path, 5)
    assert (done.rc, done.out) == (0, "ignored stdin\n")


def test_a_flooding_hook_is_kept_as_a_tail_and_what_was_left_out_counted(
    tmp_path: Path,
) -> None:
    """A hook stuck printing was held whole in memory (200 MiB of output, 650 MiB of peak RSS
    in `lifecycle boot`: bench/README.md): only the end of each stream is kept, which is all
    a run's tails ever showed."""
    flood = 'yes "warning: still waiting" | head -c 8050000; echo last words'
    write_hook(tmp_path / "hooks", "floods", f"{flood}\n({flood}) >&2\n")
    done = run_hook_process([str(tmp_path / "hooks" / "floods")], "{}", tmp_path, 30)
    assert done.rc == 0 and done.out.endswith("still waiting\nlast words\n"), done.out[-200:]
    assert len(done.out) == len(done.err) < 100_000  # unfixed: all 8 MB of each
    from lifecycle.hooks import OUTPUT_TAIL_BYTES  # here: unfixed, the assert above fails

    assert len(done.out) == OUTPUT_TAIL_BYTES
    kept_and_cut = (len(done.out) + done.out_left_out, len(done.err) + done.err_left_out)
    assert kept_and_cut == (8_050_011, 8_050_011)


# --- on-exit ----------------------------------------------------------------------------------


def test_on_exit_runs_on_normal_exit_with_what_the_step_learned(tmp_path: Path) -> None:
    write_hook(tmp_path / "hooks", "broken", '[ "$1" = on-exit ] && exit 9\nexit 0\n')
    write_hook(tmp_path / "hooks", "marker", ON_EXIT_MARKER)
    hooks = select(tmp_path / "hooks", ["broken", "marker"])
    with hook_session(hooks, "teardown", {"boot_id": "b1"}) as session:
        session.fire("post-teardown", {"removed_caches": 63})
    on_exit = [run for run in session.runs if run.event == "on-exit"]
    assert [(run.name, run.exit_code) for run in on_exit] == [("broken", 9), ("marker", 0)]
    context = on_exit_context(tmp_path)
    assert context == {
        "boot_id": "b1",
        "removed_caches": 63,
        "outcome": "ok",
        "error": None,
        "event": "on-exit",
        "step": "teardown",
    }


def test_on_exit_runs_when_the_step_raises_and_the_error_propagates(tmp_path: Path) -> None:
    write_hook(tmp_path / "hooks", "marker", ON_EXIT_MARKER)
    hooks = select(tmp_path / "hooks", ["marker"])
    with pytest.raises(RuntimeError, match="engine died"), hook_session(hooks, "boot", {}):
        raise RuntimeError("engine died at step 412")
    context = on_exit_context(tmp_path)
    assert (context["outcome"], context["error"]) == ("failed", "engine died at step 412")


CHILD = textwrap.dedent(
    """
    import signal, sys, time
    from pathlib import Path
    from lifecycle.hooks import discover, hook_session

    # A background job of a non-interactive shell starts with SIGINT ignored, and sessions
    # respect that; a CLI run from a terminal has Python's handler, as here.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    hooks_dir, ready = Path(sys.argv[1]), Path(sys.argv[2])
    with hook_session(list(discover(hooks_dir).values()), "boot", {"boot_id": "b7"}) as session:
        session.fire("pre-boot")
        ready.write_text("in the session")
        time.sleep(60)
    """
)


def start_child(root: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", CHILD, str(root / "hooks"), str(root / "ready")]
    child = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    wait_for(root / "ready")
    return child


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_on_exit_runs_when_the_process_is_signalled(tmp_path: Path, signum: int) -> None:
    write_hook(tmp_path / "hooks", "marker", ON_EXIT_MARKER)
    child = start_child(tmp_path)
    child.send_signal(signum)
    _, stderr = child.communicate(timeout=30)
    assert child.returncode != 0
    assert b"Interrupted" in stderr
    context = on_exit_context(tmp_path)
    name = signal.Signals(signum).name
    assert (context["outcome"], context["error"]) == ("interrupted", f"interrupted by {name}")
    assert context["boot_id"] == "b7"


def test_a_second_signal_does_not_cut_on_exit_short(tmp_path: Path) -> None:
    write_hook(
        tmp_path / "hooks",
        "slow-restore",
        '[ "$1" = on-exit ] || exit 0\ntouch restoring\nsleep 1\necho done > restored\n',
    )
    child = start_child(tmp_path)
    child.send_signal(signal.SIGTERM)
    wait_for(tmp_path / "restoring")
    child.send_signal(signal.SIGTERM)
    child.send_signal(signal.SIGINT)
    child.communicate(timeout=30)
    assert child.returncode != 0
    assert (tmp_path / "restored").read_text() == "done\n"


def test_a_signal_while_a_hook_runs_kills_the_hook_and_still_runs_on_exit(tmp_path: Path) -> None:
    write_hook(
        tmp_path / "hooks",
        "slow-check",
        '[ "$1" = on-exit ] && { cat > on-exit.json; exit 0; }\n'
        "sleep 60 &\necho $! > sleeper.pid\ntouch ready\nwait\n",
    )
    child = start_child(tmp_path)
    sleeper = int((tmp_path / "sleeper.pid").read_text())
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=30)
    assert child.returncode != 0
    assert on_exit_context(tmp_path)["outcome"] == "interrupted"
    deadline = time.monotonic() + 5
    while running(sleeper):
        assert time.monotonic() < deadline, "the interrupted hook's child is still running"
        time.sleep(0.05)


def test_the_previous_handlers_come_back_and_ignored_signals_stay_ignored() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with hook_session([], "boot", {}):
        assert signal.getsignal(signal.SIGTERM) != before[1]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with hook_session([], "boot", {}):
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before[0])


# --- pure logic, with an injected runner ------------------------------------------------------


class FakeRunner:
    """Records each call and answers with a fixed exit."""

    def __init__(self, rc: int | None = 0) -> None:
        self.calls: list[tuple[list[str], dict[str, Any], Path]] = []
        self.rc = rc

    def __call__(self, argv: Sequence[str], stdin: str, cwd: Path, timeout_s: float) -> HookExit:
        self.calls.append((list(argv), json.loads(stdin), cwd))
        return HookExit(self.rc, "", "")


def test_events_and_steps_are_checked_and_event_and_step_cannot_be_overridden(
    tmp_path: Path,
) -> None:
    write_hook(tmp_path / "hooks", "h", "exit 0\n")
    hooks = select(tmp_path / "hooks", ["h"])
    runner = FakeRunner()
    with pytest.raises(ValueError, match="unknown step"), hook_session(hooks, "reboot", {}):
        pass
    with pytest.raises(TypeError, match="not JSON"), hook_session(hooks, "boot", {"x": object()}):
        pass
    context = {"event": "forged", "step": "forged"}
    with hook_session(hooks, "boot", context, runner, cwd=tmp_path) as session:
        for event in ("on-exit", "boot"):
            with pytest.raises(ValueError, match="cannot fire"):
                session.fire(event)
        session.fire("post-boot")
    assert [(argv[1], stdin["event"], stdin["step"]) for argv, stdin, _ in runner.calls] == [
        ("post-boot", "post-boot", "boot"),
        ("on-exit", "on-exit", "boot"),
    ]
    assert {cwd for _, _, cwd in runner.calls} == {tmp_path}


def test_a_failing_on_exit_is_recorded_not_raised() -> None:
    hooks = discover(SHIPPED)
    with hook_session([hooks["log-event"]], "boot", {}, FakeRunner(rc=None)) as session:
        pass
    assert [(run.event, run.timed_out) for run in session.runs] == [("on-exit", True)]


# --- the shipped examples ---------------------------------------------------------------------


def test_the_shipped_hooks_are_executable_and_say_what_they_do() -> None:
    shipped = discover(SHIPPED)
    assert set(shipped) == {
        "demo-memory-history",
        "log-event",
        "memory-snapshot",
        "production-down",
        "production-status",
        "production-up",
        "restore-production",
    }
    observing = [name for name, hook in shipped.items() if hook.observing]
    assert observing == ["demo-memory-history", "memory-snapshot"]
    assert [name for name, hook in shipped.items() if not hook.acts] == ["production-status"]
    assert dict(shipped["demo-memory-history"].engine_env) == {
        "DEMOLLM_RECORD_MEMORY_HISTORY": "1",
        "DEMOLLM_MEMORY_HISTORY_TRIGGER_STEP": "64",
    }
    for hook in shipped.values():
        header = hook.path.read_text().splitlines()[:25]
        assert any("Events:" in line for line in header), hook.name


def test_restore_production_runs_the_restore_command_on_exit_whatever_the_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    displaced = shlex.quote(str(tmp_path / "displaced"))
    restored = tmp_path / "restored"
    monkeypatch.setenv("LIFECYCLE_DISPLACE_COMMAND", f"echo stopped > {displaced}")
    monkeypatch.setenv("LIFECYCLE_RESTORE_COMMAND", f"echo started > {shlex.quote(str(restored))}")
    hooks = select(SHIPPED, ["restore-production"])
    with (
        pytest.raises(RuntimeError),
        hook_session(hooks, "boot", {"boot_id": "b1"}, cwd=tmp_path) as session,
    ):
        session.fire("pre-boot")
        assert (tmp_path / "displaced").read_text() == "stopped\n"
        assert not restored.exists()
        raise RuntimeError("burst of 64 crashed the engine")
    assert restored.read_text() == "started\n"
    pre_boot, on_exit = session.runs
    assert pre_boot.ok and on_exit.ok
    assert "restoring production after a failed step: running: echo started" in on_exit.stdout_tail


def test_restore_production_without_a_command_says_so_and_a_failed_restore_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LIFECYCLE_RESTORE_COMMAND", raising=False)
    hooks = select(SHIPPED, ["restore-production"])
    with hook_session(hooks, "boot", {}, cwd=tmp_path) as session:
        pass
    assert "LIFECYCLE_RESTORE_COMMAND not set; nothing to restore" in session.runs[0].stdout_tail
    monkeypatch.setenv("LIFECYCLE_RESTORE_COMMAND", "exit 5")
    with hook_session(hooks, "boot", {}, cwd=tmp_path) as session:
        pass
    assert session.runs[0].exit_code == 5


def test_memory_snapshot_is_observing_and_writes_into_the_evidence_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"  # a stand-in docker CLI: the stats of one container
    docker.write_text('#!/bin/sh\necho "{\\"Container\\":\\"$5\\",\\"MemUsage\\":\\"21GiB\\"}"\n')
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    hooks = select(SHIPPED, ["memory-snapshot"])
    assert hooks[0].observing and instrumented(hooks)
    evidence = tmp_path / "evidence"
    context = {"boot_id": "b9", "container_id": "c0ffee", "evidence_dir": evidence}
    with hook_session(hooks, "boot", context, cwd=tmp_path) as session:
        (pre,) = session.fire("pre-boot")
        assert pre.ok and not evidence.exists()
        (post,) = session.fire("post-boot")
    assert post.ok, post.stderr_tail
    snapshot = json.loads((evidence / "memory-snapshot-b9-post-boot.json").read_text())
    assert snapshot["boot_id"] == "b9"
    assert "MemTotal:" in snapshot["meminfo"]
    assert json.loads(snapshot["docker_stats"]["out"]) == {
        "Container": "c0ffee",
        "MemUsage": "21GiB",
    }
    assert [p.name for p in evidence.iterdir()] == ["memory-snapshot-b9-post-boot.json"]


def test_log_event_prints_the_event_and_the_context_keys(tmp_path: Path) -> None:
    hooks = select(SHIPPED, ["log-event"])
    with hook_session(hooks, "boot", {"boot_id": "b1", "port": 8000}, cwd=tmp_path) as session:
        (run,) = session.fire("post-boot")
    assert run.stdout_tail == "log-event: post-boot step=boot keys=boot_id,event,port,step"
    assert not hooks[0].observing


@pytest.mark.parametrize(
    ("name", "event", "variable"),
    [
        ("production-down", "production.down", "LIFECYCLE_PRODUCTION_DOWN"),
        ("production-up", "production.up", "LIFECYCLE_PRODUCTION_UP"),
        ("production-status", "production.status", "LIFECYCLE_PRODUCTION_STATUS"),
    ],
)
def test_production_hooks_run_their_command_on_their_event_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, event: str, variable: str
) -> None:
    hook = str(SHIPPED / name)
    monkeypatch.delenv(variable, raising=False)
    unset = run_hook_process([hook, event], "{}", tmp_path, 10)
    assert unset.rc == 0 and f"{variable} not set" in unset.out
    monkeypatch.setenv(variable, "echo ran > ran; exit 7")
    assert run_hook_process([hook, "pre-boot"], "{}", tmp_path, 10).rc == 0
    assert not (tmp_path / "ran").exists()
    done = run_hook_process([hook, event], "{}", tmp_path, 10)
    assert done.rc == 7 and (tmp_path / "ran").read_text() == "ran\n"


def test_a_failing_hooks_flood_is_shown_as_its_last_lines_saying_how_much_came_before(
    tmp_path: Path,
) -> None:
    """Of a hook's output only the last OUTPUT_TAIL_BYTES are kept, and of those a run keeps
    its last lines: the error of a failing pre-boot hook showed them as if they were all it
    said. A marker as the boot log's (`[lifecycle: log cut: …]`) says how much is missing."""
    flood = "yes 'GPU 0 is busy' | head -c 100000"  # 7142 lines and "GPU 0 is bus"
    write_hook(tmp_path / "hooks", "busy", f"({flood}; echo; echo giving up) >&2\nexit 3\n")
    hooks = select(tmp_path / "hooks", ["busy"])
    with pytest.raises(HookFailed) as caught, hook_session(hooks, "boot", {}) as session:
        session.fire("pre-boot")
    shown = caught.value.lines()[1:]
    # 100011 bytes in all; the run keeps the last 20 lines: 18 whole, the part, "giving up"
    before = 100_011 - len("GPU 0 is busy\n") * 18 - len("GPU 0 is bus\n") - len("giving up\n")
    assert shown[0] == f"  [lifecycle: output cut: {before} bytes left out before these lines]"
    assert shown[-1] == "  giving up" and len(shown) == 21, shown  # unfixed: no marker
    assert session.runs[0].stderr_tail.splitlines()[0] == shown[0].strip()
