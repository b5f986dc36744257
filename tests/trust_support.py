"""Helpers for the tests that attack teardown, boots and the archive with the real services:
the CLI in-process and as its own process, the ledger's view, S3's view of a record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from lifecycle.cli import cli as lifecycle_cli
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import BootRecord, CacheRecord, all_boots, all_caches
from lifecycle.ledger.removal import TeardownStep, steps_of
from lifecycle.teardown.removal import trash_path
from tests.archive_support import versions

PREFIX = "test"  # archive_project archives to s3://<its bucket>/test


def cli(project: Path, *args: str, env: dict[str, str | None] | None = None) -> Any:
    """`lifecycle --manifests PROJECT/manifests ARGS…` in-process; the click Result."""
    return CliRunner().invoke(
        lifecycle_cli,
        ["--manifests", str(project / "manifests"), *args],
        env=env,
        catch_exceptions=False,
    )


def process(
    project: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`lifecycle` as its own process (stdin no terminal): a SIGKILL hits it, not pytest."""
    return subprocess.run(
        lifecycle_argv(project, *args),
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`lifecycle` started in the background, in its own session, output piped."""
    return subprocess.Popen(
        lifecycle_argv(project, *args),
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


# Runs `lifecycle ARGV…`, SIGKILLed right after its ledger's N-th commit (KILL_AFTER_COMMIT).
_KILLED_AFTER_COMMIT = """
import os, signal, sys
from contextlib import contextmanager
from lifecycle.cli import cli
from lifecycle.ledger import Ledger

wanted, commits, opened = int(os.environ["KILL_AFTER_COMMIT"]), [0], Ledger.transaction

@contextmanager
def transaction(self):
    with opened(self) as conn:
        yield conn
    commits[0] += 1
    if commits[0] == wanted:
        os.kill(os.getpid(), signal.SIGKILL)

Ledger.transaction = transaction
cli(sys.argv[1:], prog_name="lifecycle")
"""


def killed_after_commit(project: Path, commit: int, *args: str) -> subprocess.CompletedProcess[str]:
    """`lifecycle ARGS…` as its own process, SIGKILLed right after its ledger's `commit`-th
    transaction commits (returncode -9), or run to its end when it commits fewer: a kill at
    each boundary between its ledger writes in turn, where a random kill seldom lands."""
    return subprocess.run(
        [sys.executable, "-c", _KILLED_AFTER_COMMIT, *lifecycle_argv(project, *args)[3:]],
        env={**os.environ, "KILL_AFTER_COMMIT": str(commit)},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def lifecycle_argv(project: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), *args]


def boot(project: Path, *args: str) -> dict[str, Any]:
    """Boot demo/0.2 (`--cold` or warm as `args` say) in-process; the boot report."""
    result = cli(project, "boot", "demo/0.2", "--json", *args)
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def cache_ids(report: dict[str, Any]) -> list[str]:
    """The ids of the caches a boot report lists, sorted."""
    return sorted(u["cache_id"] for u in report["caches"])


def home() -> Path:
    return Path(os.environ["LIFECYCLE_HOME"])


def caches() -> dict[str, CacheRecord]:
    """Every cache the ledger knows, by id."""
    ledger = Ledger.open(home())
    try:
        return {c.id: c for c in all_caches(ledger)}
    finally:
        ledger.close()


def boots() -> dict[str, BootRecord]:
    """Every boot the ledger knows, by id."""
    ledger = Ledger.open(home())
    try:
        return {b.id: b for b in all_boots(ledger)}
    finally:
        ledger.close()


def journal(cache_id: str) -> list[TeardownStep]:
    ledger = Ledger.open(home())
    try:
        return steps_of(ledger, cache_id)
    finally:
        ledger.close()


def plan_of(result: Any) -> dict[str, dict[str, Any]]:
    """cache id -> its entry in a `teardown --json` plan."""
    return {c["id"]: c for c in json.loads(result.stdout)["plan"]["caches"]}


def gone(cache: CacheRecord) -> bool:
    """Neither in place nor in a teardown's trash."""
    return not Path(cache.host_path).exists() and not trash_path(cache).exists()


def record(
    s3_client: Any, bucket: str, cache_id: str, tree: str | None = None
) -> dict[str, Any] | None:
    """The cache's newest version record in S3 (of that tree, if given; one holding the
    cache's files preferred), or None."""
    found = [
        v
        for v in versions(s3_client, bucket, PREFIX, cache_id)
        if tree is None or v["tree_digest"] == tree
    ]
    return max(found, key=lambda v: (v["with_content"], v["archived_at"])) if found else None
