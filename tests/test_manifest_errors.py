"""Manifest errors beyond the corpus (tests/test_bad_input.py): several files, --debug."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CORPUS = Path(__file__).parent / "bad_input"


def _run_validate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lifecycle", "validate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


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
        shutil.copytree(CORPUS / f"manifest-{case}", tmp_path / case)
    result = _run_validate("unknown-key/manifest.yaml", "zero-seqs/manifest.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert [line.split(":")[0] for line in result.stderr.splitlines()] == [
        "unknown-key/manifest.yaml",
        "zero-seqs/manifest.yaml",
    ]
