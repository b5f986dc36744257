"""The README's first command: the whole demo flow (.ci/demo) against the real services."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from pathlib import Path

import pytest

from tests.test_night_report import PROBE, browse

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
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "is up to date" in out
    assert "removed 4 caches" in out
    baked = out[out.index("== archive, bake") : out.index("== audit of")]
    assert "-serve-baked (sha256:" in baked and "jit: warm" in baked, baked
    assert "vllm baked warm-hit" in baked, baked
    audit = out[out.index("== audit of") : out.index("== the acceptance night")]
    for link in ("boot", "cache", "image", "manifest", "patch"):
        assert link in audit.lower(), audit
    assert "kernel-mix.patch" in audit

    # The night: each lesson of issue 18, as the demo engine reproduces it.
    night = out[out.index("== the night") :]
    assert "production.status: hooks/production-status (asks) said: production running" in out
    assert "proposed: carried 0.92 does not clear 40 MiB cold and warm; proposed 0.91" in out
    for state in ("cold", "warm"):  # the instrumented pass that the plain run refutes
        assert (
            "the hook changed the outcome: 2/3 with, 0/5 without (demo-memory-history;"
            f" demo/0.2 batch {state})" in night
        )
        # the tier check: inconclusive until its path runs, then failing on 0.2
        assert f"demo/0.2:tier:{state}: inconclusive 0/1: cpu-tier-readback inconclusive" in night
        assert f"demo/0.2:tier-shrunk:{state}: fail 0/1: cpu-tier-readback fail" in night
    assert "demo/0.1 gpu_memory_utilization: written: 0.92 validated: 46.0 MiB cold" in night
    assert "demo/0.2 gpu_memory_utilization: written: 0.91 validated: 789.4 MiB cold" in night
    assert "production: down" in night and "now up" in night
    assert "teardown: removed 128 caches after their evidence was archived" in night
    [report] = re.findall(r"(?m)^  report: (\S+)$", night)
    html = Path(report).read_text()
    assert "the hook changed the outcome" in html
    probed = tmp_path / "probed.html"  # the demo's own report, laid out by a real browser
    probed.write_text(html.replace("</body>", PROBE + "</body>"))
    [measured] = re.findall(r'data-measured="([^"]*)"', browse(probed, "--dump-dom").stdout)
    laid_out = json.loads(measured.replace("&quot;", '"'))
    assert laid_out["rows"] == 1 + 2 * 4 and laid_out["tableHeight"] > 100
    assert len([s for s in laid_out["series"] if s[2] > 100]) == 6  # 2 pins x cold, warm, predicted
