"""A project to run nights in: the demo manifests built, hooks whose production is a file.

The production hooks write `up` or `down` into `prod.state` in the project, and each of their
runs as one line of `prod.log`; a flag file `slow-down` makes the down hook hold (its pid in
`down.pid`) until it is killed, so a test can SIGKILL the night while production goes down.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent

PRODUCTION_DOWN = """#!/bin/sh
# lifecycle: acts
[ "$1" = production.down ] || exit 0
echo "$1 $$" >> prod.log
if [ -e slow-down ]; then echo $$ > down.pid; sleep 120; fi
echo down > prod.state
"""
PRODUCTION_UP = """#!/bin/sh
# lifecycle: acts
[ "$1" = production.up ] || exit 0
echo "$1 $$" >> prod.log
[ -e fail-up ] && exit 1
echo up > prod.state
"""
PRODUCTION_STATUS = """#!/bin/sh
# lifecycle: asks
[ "$1" = production.status ] || exit 0
echo "$1 $$" >> prod.log
echo "production is $(cat prod.state 2>/dev/null || echo unknown)"
"""
CHECK_FORCED = {
    "name": "forced-64",
    "creates": [{"what": "one request carrying 64 prompts", "args": ["--forced-prompts", "64"]}],
    "path": {"log": ["step 1: requests=1 prompts=64 "]},
    "pass_when": {"log": ["forced step: 64 prompts served"]},
    "fail_when": {"log": ["CUDA out of memory"]},
}


def make_project(root: Path, run: Callable[..., Any], *, own_images: bool = False) -> Path:
    """The demo manifests, the repo's hooks plus the file-backed production hooks; both demo
    releases built through `run` (tests.services.run_lifecycle). With `own_images`, the
    releases differ from the demo's by one profile variable, so their images are not the ones
    other tests boot, and a test may remove them while those run."""
    for version in ("0.1", "0.2"):
        shutil.copytree(REPO / f"manifests/demo/{version}", root / f"manifests/demo/{version}")
    if own_images:  # 0.2 extends 0.1: both digests, and so both images, move
        manifest = root / "manifests/demo/0.1/manifest.yaml"
        document = yaml.safe_load(manifest.read_text())
        document["profiles"]["serve"]["env"]["LIFECYCLE_TEST_PROJECT"] = root.name
        manifest.write_text(yaml.safe_dump(document, sort_keys=False))
    shutil.copytree(REPO / "hooks", root / "hooks")
    for name, body in [
        ("prod-down", PRODUCTION_DOWN),
        ("prod-up", PRODUCTION_UP),
        ("prod-status", PRODUCTION_STATUS),
    ]:
        hook = root / "hooks" / name
        hook.write_text(body)
        hook.chmod(0o755)
    (root / "prod.state").write_text("up\n")
    for version in ("demo/0.1", "demo/0.2"):
        built = run(root, "build", version)
        assert built.exit_code == 0, built.output
    return root


def write_plan(project: Path, name: str, **plan: Any) -> Path:
    """A plan file (YAML is a superset of JSON) in the project."""
    document = {
        "schema_version": 1,
        "name": name,
        "production": {"down": "prod-down", "up": "prod-up", "status": "prod-status"},
        **plan,
    }
    path = project / f"{name}.yaml"
    path.write_text(json.dumps(document, indent=1))
    return path


def lifecycle(
    project: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`python3 -m lifecycle --manifests PROJECT/manifests ARGS` as a process of its own (so a
    test can SIGKILL it), this checkout first on the path."""
    return subprocess.Popen(
        [sys.executable, "-m", "lifecycle", "--manifests", str(project / "manifests"), *args],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str], timeout: float = 600) -> tuple[int, str, str]:
    """Wait for it; (exit code, stdout, stderr)."""
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def journal(home: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows from the night tables, read-only (the night may be running)."""
    uri = (home / "ledger.sqlite3").absolute().as_uri() + "?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True, timeout=5)) as conn:
            return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:  # no ledger (or no table) yet
        return []


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 120) -> None:
    """Poll until `condition` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.1)


def sigkill(process: subprocess.Popen[str]) -> None:
    """SIGKILL: no finally, no exit trap, nothing but the journal survives."""
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
