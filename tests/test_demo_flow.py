"""The README's first command: the whole demo flow (.ci/demo) against the real services."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.s3]


def test_demo_flow_ends_with_the_audit_chain_from_s3(
    repo_root: Path, tmp_path: Path, docker_client: object, s3_client: object
) -> None:
    bucket = f"lifecycle-demo-test-{secrets.token_hex(4)}"
    env = {
        **os.environ,
        "LIFECYCLE_DEMO_HOME": str(tmp_path / "home"),
        "LIFECYCLE_ARCHIVE": f"s3://{bucket}/night",
    }
    done = subprocess.run(
        ["bash", str(repo_root / ".ci/demo")],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "is up to date" in out
    assert "removed 4 caches" in out
    audit = out[out.index("== audit of") :]
    for link in ("boot", "cache", "image", "manifest", "patch"):
        assert link in audit.lower(), audit
    assert "kernel-mix.patch" in audit
