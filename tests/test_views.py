"""The team views' filters (`caches|boots|results --from` and the local listings): by manifest,
GPU arch, state and age, each keeping exactly the rows it names. On an archive of four caches,
one boot and one result (tests/data/previous_archive, written by the previous release)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.services import PREVIOUS_RESULT as RESULT
from tests.services import ArchiveTarget, run_lifecycle

pytestmark = pytest.mark.s3


def _ids(target: ArchiveTarget, home: Path, verb: str, *filters: str) -> set[str]:
    env = {**target.env, "LIFECYCLE_HOME": str(home)}
    result = run_lifecycle(home.parent, verb, *filters, "--json", env=env)
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)[verb]
    return {row["id"] for row in rows}


def test_each_filter_keeps_what_it_names(previous_archive: ArchiveTarget, tmp_path: Path) -> None:
    previous = previous_archive
    url, home = previous.url, tmp_path / "home"
    caches = _ids(previous, home, "caches", "--from", url)
    assert len(caches) == 4
    boots = _ids(previous, home, "boots", "--from", url)
    assert _ids(previous, home, "results", "--from", url) == {RESULT}
    for verb, everything, state, other_state in (
        ("caches", caches, "restorable", "evidence"),
        ("boots", boots, "ok", "failed"),
        ("results", {RESULT}, "pass", "fail"),
    ):
        for kept, dropped in (
            (("--manifest", "demo"), ("--manifest", "other")),
            (("--arch", "unknown"), ("--arch", "90a")),
            (("--state", state), ("--state", other_state)),
            (("--older-than", "1s"), ("--newer-than", "1s")),  # archived a while ago
        ):
            assert _ids(previous, home, verb, "--from", url, *kept) == everything, (verb, kept)
            assert _ids(previous, home, verb, "--from", url, *dropped) == set(), (verb, dropped)

    # The same filters on this host's own ledger: one cache restored here, live.
    restored = sorted(caches)[0]
    assert (
        run_lifecycle(
            home.parent, "restore", restored, "--from", url, env={"LIFECYCLE_HOME": str(home)}
        ).exit_code
        == 0
    )
    assert _ids(previous, home, "caches", "--state", "live", "--arch", "unknown") == {restored}
    assert _ids(previous, home, "caches", "--state", "archived") == set()
    # A restored cache keeps the age it had where it was made (the fixture's, hours or more).
    assert _ids(previous, home, "caches", "--manifest", "demo", "--older-than", "1s") == {restored}
    assert _ids(previous, home, "caches", "--manifest", "demo", "--newer-than", "1s") == set()
