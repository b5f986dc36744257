"""The listings of this host's ledger (`caches`, `boots`, `results`) on a home a year of nights
old: `--json` is the document it always was, byte for byte, written a row at a time, so that
its memory does not grow with every cache the home ever had. The homes are made by
bench/ledger_scale.py (lifecycle's own ledger functions, no engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

import lifecycle.cli
from bench.boot_flood import lifecycle as measured_lifecycle
from bench.ledger_scale import make_home
from lifecycle.cli import cli
from lifecycle.commands import listing, verbs
from lifecycle.commands.context import Context
from lifecycle.home import Home

REPO = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)  # what the home's ages are counted to

# (verb, arguments): each listing, whole and filtered (a filter keeps some rows, or none)
LISTINGS = [
    (listing.caches, ["caches"]),
    (listing.caches, ["caches", "--manifest", "0.31", "--state", "torn-down"]),
    (listing.boots, ["boots"]),
    (listing.boots, ["boots", "--state", "interrupted"]),
    (listing.results, ["results"]),
    (listing.results, ["results", "--manifest", "no-such-manifest"]),
]
# What printing 7,200 caches' JSON may add to listing them as a table (MiB): 39 when the
# document was made whole, ~0 a row at a time; room for the allocator's moods.
JSON_MIB = 12
REQUESTS = {"caches": verbs.Caches, "boots": verbs.Boots, "results": verbs.Results}


@pytest.fixture(scope="module")
def year_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home of 300 boots (a host's five nights), made once for this file's tests."""
    home = tmp_path_factory.mktemp("year") / "lifecycle"
    make_home(home, 300, NOW)
    return home


def _at_now(made: Context) -> Context:
    return replace(made, now=lambda: NOW)


def test_json_of_a_listing_is_the_whole_document_it_was(
    year_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `--json` prints, a row at a time, against the document made whole (`to_json`,
    `json.dumps` indented by 2), which is how it was printed before; the table is unchanged."""
    monkeypatch.setenv("LIFECYCLE_HOME", str(year_home))
    made_context = lifecycle.cli._context
    monkeypatch.setattr(lifecycle.cli, "_context", lambda: _at_now(made_context()))
    runner = CliRunner()
    for verb, args in LISTINGS:
        printed = runner.invoke(cli, [*args, "--json"])
        assert printed.exit_code == 0, printed.output
        ctx = Context(os.environ, REPO / "manifests", Home(year_home), now=lambda: NOW)
        asked = REQUESTS[args[0]](**_options(args[1:]), as_json=True)
        whole = verb(ctx, asked)
        assert printed.stdout == json.dumps(whole.to_json(), indent=2) + "\n", args
        table = runner.invoke(cli, args)
        assert table.stdout == whole.text(), args
    rows = json.loads(runner.invoke(cli, ["caches", "--json"]).stdout)["caches"]
    assert len(rows) == 1080 and rows[0]["age_s"] > 0  # 300 boots' caches, counted to NOW


def _options(args: list[str]) -> dict[str, str | None]:
    """A listing's request fields from its `--name value` arguments."""
    given = dict(zip(args[::2], args[1::2], strict=True))
    names = ("source", "manifest", "arch", "state", "older_than", "newer_than")
    return {name: given.get(f"--{name.replace('_', '-')}") for name in names}


def test_json_of_every_cache_takes_no_more_memory_than_reading_them(tmp_path: Path) -> None:
    """`caches --json` made the whole document before printing it: every row's dict, the
    encoder's pieces and the text, 606 MiB at 20,000 boots (bench/README.md). Against the same
    listing filtered to nothing (the ledger read just the same, no row printed) it held 39 MiB
    more at 2,000 boots; a row at a time, none. A filter is now asked of the ledger, so the
    listing that reads just the same rows is the table of them (its text made whole: 3 MiB
    above the JSON at 2,000 boots)."""
    home = tmp_path / "lifecycle"
    make_home(home, 2000, datetime.now(UTC))
    listed, peak_kib = measured_lifecycle(REPO, home, "caches", "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)["caches"]) == 7200
    table, read_kib = measured_lifecycle(REPO, home, "caches")
    assert table.returncode == 0 and table.stdout.count("\n") == 7201
    assert (peak_kib - read_kib) / 1024 < JSON_MIB, (peak_kib, read_kib)


# What only a listing of an archive (`--from`) or another verb needs: the archive's records and
# its S3 client, pydantic (the manifest and record models), the docker SDK and the boot verb.
ARCHIVE_ONLY = {"boto3", "botocore", "docker", "pydantic", "yaml"}
ARCHIVE_ONLY_LIFECYCLE = {"lifecycle.archive.catalog", "lifecycle.commands.boot"}


@pytest.mark.parametrize("args", [["caches"], ["boots"], ["results"], ["results", "--json"]])
def test_a_listing_of_this_host_imports_nothing_only_an_archive_needs(
    year_home: Path, args: list[str]
) -> None:
    """The read verbs run from scripts every night: `lifecycle caches` imported the archive's
    catalog (pydantic, botocore) and the boot verb for `--from` and two small types, ~0.2 s
    of every listing of this host's ledger. They are imported when `--from` is given."""
    listed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "lifecycle", *args],
        cwd=REPO,
        env={**os.environ, "LIFECYCLE_HOME": str(year_home)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("\n") > 100  # the rows were listed
    imported = {
        line.split("|")[-1].strip()
        for line in listed.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "lifecycle.ledger.boots" in imported  # the probe works
    needless = {name.split(".")[0] for name in imported} & ARCHIVE_ONLY
    assert not needless | (imported & ARCHIVE_ONLY_LIFECYCLE), args
