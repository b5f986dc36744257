"""A Docker engine that accepts connections and never answers: every command fails within its
time limits, exit 3, with one line naming the endpoint; nothing is removed, no record is
written. The limits are a third of their defaults here (first contact 5 s, every later call
20 s): the same code waits for them, and the commands run side by side, so the whole attack
costs some 20 s. An S3 server's: tests/test_bounded_s3.py."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.silent_servers import SilentRelay, silent_listener
from tests.trust_support import boot, boots, cache_ids, caches, cli, lifecycle_argv

pytestmark = [pytest.mark.docker, pytest.mark.s3]
LIMITS = {"LIFECYCLE_DOCKER_CONNECT_TIMEOUT": "5", "LIFECYCLE_DOCKER_TIMEOUT": "20"}
LIMIT_S = 20.0


@pytest.fixture
def hung() -> Iterator[str]:
    """`127.0.0.1:PORT` of a listener that accepts every connection and never says a word."""
    with silent_listener() as listener:
        yield listener.address


@pytest.fixture
def falls_silent() -> Iterator[str]:
    """`tcp://127.0.0.1:PORT` of a relay to this host's dockerd that passes everything until a
    request to create a container, then nothing more (dockerd hung mid-command: it answered
    the first contact)."""
    relay = SilentRelay("/var/run/docker.sock", r"/containers/create")
    try:
        yield f"tcp://{relay.address}"
    finally:
        relay.close()


def _run_all(project: Path, commands: list[list[str]], env: dict[str, str]) -> list[Any]:
    """Run every command at once; (argv, rc, stdout, stderr, seconds) of each."""
    import os

    started = time.monotonic()
    running = [
        (
            argv,
            subprocess.Popen(
                lifecycle_argv(project, *argv),
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for argv in commands
    ]
    done = []
    for argv, process in running:
        out, err = process.communicate(timeout=LIMIT_S * 2)
        done.append((argv, process.returncode, out, err, time.monotonic() - started))
    return done


def _assert_failed_fast(results: list[Any], endpoint: str) -> None:
    for argv, rc, out, err, seconds in results:
        what = f"lifecycle {' '.join(argv)}: rc {rc} after {seconds:.1f} s\n{out}\n{err}"
        assert rc == 3, what
        assert seconds < LIMIT_S, what
        assert "Traceback" not in err, what
        errors = [line for line in err.splitlines() if not line.startswith("  | ")]
        assert errors and endpoint in errors[-1], what


def _state(s3_client: Any, bucket: str) -> tuple[object, ...]:
    listed = s3_client.list_objects_v2(Bucket=bucket).get("Contents", [])
    objects = sorted((o["Key"], o["ETag"]) for o in listed)
    ledger = sorted((c.id, c.state, Path(c.host_path).is_dir()) for c in caches().values())
    return tuple(objects), tuple(ledger)


def test_a_hung_docker_engine_fails_every_command_in_bounded_time(
    archive_project: Path, hung: str, s3_client: Any, s3_bucket: str
) -> None:
    ids = cache_ids(boot(archive_project, "--cold"))
    assert cli(archive_project, "archive", *ids[:2]).exit_code == 0
    before = _state(s3_client, s3_bucket)
    commands = [
        ["build", "demo/0.2"],
        ["build", "demo/0.2", "--force"],
        ["boot", "demo/0.2"],
        ["teardown", "--dry-run"],
        ["teardown", "--yes"],
        ["bake", "demo/0.2"],  # it once asked dockerd twice, waiting twice
        ["plan"],
    ]
    hung_docker = {"DOCKER_HOST": f"tcp://{hung}", **LIMITS}
    results = _run_all(archive_project, commands, hung_docker)
    # One teardown at a time per host: two at once, one would be refused by the other's lock.
    images = ["teardown", "--archive", "--yes", "--images"]
    results += _run_all(archive_project, [images], hung_docker)
    results += _run_all(archive_project, [["apply", "--yes"]], hung_docker)  # teardown's lock too
    # plan and apply keep what dockerd guards and say so in the plan itself: not converged.
    planned = [r for r in results if r[0][0] in ("plan", "apply")]
    for argv, rc, out, err, seconds in planned:
        assert rc == 3 and seconds < LIMIT_S, (argv, rc, seconds, out, err)
        assert f"incomplete: not asked: cannot reach the Docker engine at tcp://{hung}" in out
    _assert_failed_fast([r for r in results if r not in planned], f"tcp://{hung}")
    assert _state(s3_client, s3_bucket) == before  # nothing removed, nothing archived


def test_a_registry_that_never_answers_a_push_fails_it_in_bounded_time(
    archive_project: Path, hung: str
) -> None:
    """dockerd pushes to a registry that accepts and never answers, and says nothing until its
    own limit (~25 s here): lifecycle's wait for dockerd (LIFECYCLE_DOCKER_TIMEOUT) ends
    first. That is the environment (exit 3, one line naming the registry), not a bug (exit 4
    and a traceback file, as the SDK's stream let urllib3's timeout through unwrapped)."""
    limits = {"LIFECYCLE_DOCKER_TIMEOUT": "4"}
    ((_, rc, out, err, seconds),) = _run_all(
        archive_project, [["build", "demo/0.2", "--push", hung]], limits
    )
    said = f"rc {rc} after {seconds:.1f} s\n{out}\n{err}"
    assert rc == 3 and seconds < 15, said
    assert "unexpected error" not in err and "Traceback" not in err, said
    last = err.strip().splitlines()[-1]
    assert f"push of {hung}/lifecycle/demo:" in last and "LIFECYCLE_DOCKER_TIMEOUT" in last, said


def test_a_docker_engine_falling_silent_mid_boot_is_the_environment_and_the_boot_is_recorded(
    archive_project: Path, falls_silent: str
) -> None:
    """dockerd answered the boot's first contact, its image lookup and its listing, then never
    answered the create: exit 3 in one line naming the engine and the limit (the SDK's read
    timeout was a bug's exit 4, with a traceback file), and the boot row ends `failed`."""
    env = {"DOCKER_HOST": falls_silent, "LIFECYCLE_DOCKER_TIMEOUT": "3"}
    ((_, rc, out, err, seconds),) = _run_all(archive_project, [["boot", "demo/0.2"]], env)
    said = f"rc {rc} after {seconds:.1f} s\n{out}\n{err}"
    assert rc == 3 and seconds < 15, said
    assert "unexpected error" not in err and "Traceback" not in err, said
    last = err.strip().splitlines()[-1]
    assert f"the Docker engine at {falls_silent} stopped answering" in last, said
    assert "LIFECYCLE_DOCKER_TIMEOUT" in last, said
    (row,) = boots().values()
    assert row.outcome == "failed" and row.ended_at is not None, row
    assert not any(c.in_use_by for c in caches().values())  # every lease given back
