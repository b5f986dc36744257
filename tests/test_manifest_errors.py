"""Every broken manifest in tests/broken/ gives one `path:line:col: key.path: message` line, exit 2.

Each case's first line says what it expects: `# expect: [FILE:]LINE:COL KEY.PATH: MESSAGE-PREFIX`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BROKEN = Path(__file__).parent / "broken"
CASES = sorted(p.name for p in BROKEN.iterdir() if (p / "manifest.yaml").is_file())
EXPECT = re.compile(r"^# expect: (?:(?P<file>[\w.-]+):)?(?P<line>\d+):(?P<col>\d+) (?P<rest>.+)$")


def _run_validate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", "validate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_there_are_at_least_15_cases() -> None:
    assert len(CASES) >= 15


@pytest.mark.parametrize("case", CASES)
def test_broken_manifest_gives_one_located_line(case: str, tmp_path: Path) -> None:
    case_dir = tmp_path / case
    shutil.copytree(BROKEN / case, case_dir, symlinks=True)
    if case == "patch-symlink-escape":
        # A link inside the manifest's dir pointing outside it; made here, not committed.
        outside = tmp_path / "outside.patch"
        outside.write_text("--- a/x\n+++ b/x\n")
        (case_dir / "escape.patch").symlink_to(outside)
    manifest = case_dir / "manifest.yaml"
    expect = EXPECT.match(manifest.read_text().splitlines()[0])
    assert expect, f"{case}: first line must be an '# expect:' comment"

    result = _run_validate(f"{case}/manifest.yaml", cwd=tmp_path)

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    file = f"{case}/{expect['file'] or 'manifest.yaml'}"
    prefix = f"{file}:{expect['line']}:{expect['col']}: {expect['rest']}"
    assert lines[0].startswith(prefix), f"\n got: {lines[0]}\nwant: {prefix}…"


def test_missing_file(tmp_path: Path) -> None:
    result = _run_validate("nowhere/manifest.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "nowhere/manifest.yaml:1:1: (file): no such file\n"


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lifecycle", "--debug", "show", "nowhere.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert result.stderr.rstrip().endswith("nowhere.yaml:1:1: (file): no such file")


def test_every_file_is_reported_not_just_the_first(tmp_path: Path) -> None:
    for case in ("unknown-key", "zero-seqs"):
        shutil.copytree(BROKEN / case, tmp_path / case)
    result = _run_validate("unknown-key/manifest.yaml", "zero-seqs/manifest.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert [line.split(":")[0] for line in result.stderr.splitlines()] == [
        "unknown-key/manifest.yaml",
        "zero-seqs/manifest.yaml",
    ]
