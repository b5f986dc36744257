"""The CLI: entry points, JSON output, schema, and start-up that loads no SDKs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lifecycle import __version__
from lifecycle.cli import cli


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)


def test_version_and_module_entry_point(repo_root: Path) -> None:
    for command in (["lifecycle"], [sys.executable, "-m", "lifecycle"]):
        result = _run(*command, "--version", cwd=repo_root)
        assert result.returncode == 0, result.stderr
        assert __version__ in result.stdout


@pytest.mark.parametrize(
    "args",
    [("schema",), ("schema", "--record", "boot")],  # more than stdout's buffer, and less
)
def test_a_reader_that_went_ends_the_verb_as_sigpipe_would_not_as_a_bug(
    repo_root: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    read, write = os.pipe()
    os.close(read)  # `| head -1`, gone before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-m", "lifecycle", *args], cwd=repo_root, stdout=write,
            stderr=subprocess.PIPE, text=True, env={**os.environ, "LIFECYCLE_HOME": str(tmp_path)},
            check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")
    assert not (tmp_path / "crashes").exists()


def test_validate_production_manifests(repo_root: Path) -> None:
    result = _run(
        "lifecycle",
        "validate",
        "manifests/0.30/manifest.yaml",
        "manifests/0.31/manifest.yaml",
        cwd=repo_root,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ok manifests/") == 2


def test_show_json_of_031(repo_root: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--manifests", str(repo_root / "manifests"), "show", "0.31", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["pins"]["vllm"] == "0.31.0"
    assert report["pins"]["flashinfer"].startswith("0.7.0")
    tuned = report["tuned"]["gpu_memory_utilization"]
    assert tuned["value"] == 0.94 and tuned["status"] == "validated"
    assert re.fullmatch("[0-9a-f]{64}", report["digest"])
    assert [p["file"] for p in report["patches"]] == [
        "patches/lifecycle-provenance-plugin.patch",
        "patches/kv-offload-readback-log.patch",
    ]


def test_show_text_flags_carried_values(tmp_path: Path, repo_root: Path) -> None:
    child = tmp_path / "m.yaml"
    child.write_text(
        f"extends: {repo_root}/manifests/0.30/manifest.yaml\n"
        "tuned:\n  gpu_memory_utilization: {status: carried, carried_from: '0.30'}\n"
    )
    result = CliRunner().invoke(cli, ["show", str(child)])
    assert result.exit_code == 0, result.output
    assert "gpu_memory_utilization=0.94 (carried from 0.30)  <- NOT re-validated" in result.output


def _with_bench_profile(tmp_path: Path, repo_root: Path) -> Path:
    """0.31 plus a profile that runs a benchmark client, not the engine."""
    child = tmp_path / "m.yaml"
    child.write_text(
        f"extends: {repo_root}/manifests/0.31/manifest.yaml\n"
        "profiles:\n"
        "  bench: {engine: false, command: [python3, -m, bench], args: [--rate, '2']}\n"
    )
    return child


def test_show_says_which_args_each_profile_gets(tmp_path: Path, repo_root: Path) -> None:
    child = _with_bench_profile(tmp_path, repo_root)
    result = CliRunner().invoke(cli, ["show", str(child)])
    assert result.exit_code == 0, result.output
    assert (
        "# profile serve: vllm serve --model /models/served --port 8000"
        " [tuned: --gpu-memory-utilization 0.94]\n" in result.output
    )
    assert "# profile bench: python3 -m bench --rate 2 [not the engine: no tuned args]\n" in (
        result.output
    )
    report = json.loads(CliRunner().invoke(cli, ["show", str(child), "--json"]).output)
    assert report["profiles"] == {
        "serve": {
            "engine": True,
            "command": ["vllm", "serve", "--model", "/models/served", "--port", "8000",
                        "--gpu-memory-utilization", "0.94"],
            "tuned_args": ["--gpu-memory-utilization", "0.94"],
        },
        "bench": {
            "engine": False,
            "command": ["python3", "-m", "bench", "--rate", "2"],
            "tuned_args": [],
        },
    }  # fmt: skip


def test_show_prints_the_registry_outside_the_digest(tmp_path: Path, repo_root: Path) -> None:
    release = tmp_path / "0.31-team"
    release.mkdir()
    (release / "manifest.yaml").write_text(
        f"extends: {repo_root}/manifests/0.31/manifest.yaml\nregistry: 127.0.0.1:5000/team\n"
    )
    shown = CliRunner().invoke(cli, ["show", str(release)])
    assert shown.exit_code == 0, shown.output
    assert "\nname: vllm-prod\nregistry: 127.0.0.1:5000/team\n" in shown.output
    report = json.loads(CliRunner().invoke(cli, ["show", str(release), "--json"]).output)
    assert report["registry"] == "127.0.0.1:5000/team"
    plain = json.loads(CliRunner().invoke(cli, ["show", "0.31", "--json"]).output)
    assert report["digest"] == plain["digest"]  # where it is kept is not what it is


def test_validate_takes_a_manifest_dir_as_show_does(repo_root: Path) -> None:
    one = _run("lifecycle", "validate", "manifests/0.31", cwd=repo_root)
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith("ok manifests/0.31/manifest.yaml sha256:")
    shown = _run("lifecycle", "show", "manifests/0.31", cwd=repo_root)
    assert shown.returncode == 0, shown.stderr
    nested = _run("lifecycle", "validate", "manifests/demo", cwd=repo_root)  # every one under it
    assert nested.returncode == 0, nested.stderr
    assert nested.stdout.count("ok manifests/demo/") == 2


def test_validate_takes_a_ref_as_build_does(repo_root: Path) -> None:
    # `lifecycle validate demo/0.2` named "demo/0.2:1:1: (file): no such file", though every
    # other verb takes that ref; a path that is there still wins over a ref.
    ref = _run("lifecycle", "validate", "demo/0.2", "0.31", cwd=repo_root)
    assert ref.returncode == 0, ref.stderr
    demo, release = ref.stdout.splitlines()
    assert demo.startswith(f"ok {repo_root}/manifests/demo/0.2/manifest.yaml sha256:"), demo
    assert release.startswith(f"ok {repo_root}/manifests/0.31/manifest.yaml sha256:"), release
    unknown = _run("lifecycle", "validate", "demo/9.9", cwd=repo_root)
    assert unknown.returncode == 2
    assert "demo/9.9" in unknown.stderr and "no such file" in unknown.stderr


@pytest.mark.parametrize("args", [["verify", "c-nope"], ["audit", "result", "r-nope"]])
def test_an_unknown_id_names_the_home_by_its_path(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lifecycle.ledger import Ledger

    Ledger.open(tmp_path / "home").close()
    monkeypatch.setenv("LIFECYCLE_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert f"in the ledger at {tmp_path / 'home'} (" in result.stderr, result.stderr
    assert "Home(" not in result.stderr


def test_show_unknown_version_is_a_clear_error(repo_root: Path) -> None:
    result = _run("lifecycle", "show", "0.99", cwd=repo_root)
    assert result.returncode == 2
    assert "no manifest for '0.99'" in result.stderr and "Traceback" not in result.stderr


def test_schema_is_json_schema_with_closed_objects(repo_root: Path) -> None:
    result = CliRunner().invoke(cli, ["schema"])
    schema = json.loads(result.output)
    assert schema["$schema"].endswith("2020-12/schema")
    assert schema["additionalProperties"] is False
    assert "required" not in json.dumps(schema)  # keys may come through `extends`
    assert set(schema["properties"]) >= {"engine", "patches", "tuned", "caches", "profiles"}


def test_start_up_imports_neither_docker_nor_boto3(repo_root: Path) -> None:
    for code in (
        "import lifecycle.cli",
        "import sys; sys.argv=['lifecycle','--help']; import lifecycle.cli as c; c.main()",
        # --manifests is checked by the group, for every verb; that check reads no manifest.
        "import sys; sys.argv=['lifecycle','--manifests','manifests','boots','--help'];"
        " import lifecycle.cli as c; c.main()",
    ):
        result = _run(sys.executable, "-X", "importtime", "-c", code, cwd=repo_root)
        imported = {
            line.split("|")[-1].strip().split(".")[0]
            for line in result.stderr.splitlines()
            if line.startswith("import time:")
        }
        assert "click" in imported  # the probe works
        assert not imported & {"docker", "boto3", "botocore", "pydantic"}, imported


def test_the_collector_is_off_only_while_a_command_starts(repo_root: Path) -> None:
    # In a child: this test process keeps its own collector as it is.
    code = (
        "import gc, time; from lifecycle import cli\n"
        "cli._no_collection_at_start(0.2)\n"
        "at_start = gc.isenabled(); time.sleep(1.5)\n"
        "print(at_start, gc.isenabled())"
    )
    result = _run(sys.executable, "-c", code, cwd=repo_root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"]


def test_help_lists_the_exit_codes() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    table = result.output[result.output.index("Exit codes:") :].splitlines()[1:6]
    assert [line.split()[0] for line in table] == ["0", "1", "2", "3", "4"]


def test_an_unexpected_error_is_one_redacted_line_and_a_traceback_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lifecycle.commands.schema

    def broken() -> None:
        raise RuntimeError("boom while holding sk-live-0123456789abcdef")

    monkeypatch.setattr(lifecycle.commands.schema, "manifest_json_schema", broken)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sk-live-0123456789abcdef")
    result = CliRunner().invoke(cli, ["schema"])
    assert result.exit_code == 4
    [line] = result.stderr.splitlines()
    assert line.startswith("lifecycle: unexpected error (a bug): RuntimeError: boom while holding")
    assert "sk-live" not in line and "<redacted:AWS_SECRET_ACCESS_KEY>" in line
    written = Path(line.rsplit("traceback in ", 1)[1])
    assert written.parent == Path(os.environ["LIFECYCLE_HOME"]) / "crashes"
    text = written.read_text()
    assert "Traceback" in text and "RuntimeError" in text and "sk-live" not in text
    debug = CliRunner().invoke(cli, ["--debug", "schema"])
    assert debug.exit_code == 4 and "Traceback" in debug.stderr


# Verbs that remove or widen what they act on: a value left empty must not mean "every one".
DESTRUCTIVE = ("teardown", "gc", "unpin", "night")


@pytest.mark.parametrize("verb", DESTRUCTIVE)
def test_no_text_value_of_a_destructive_verb_may_be_empty(verb: str) -> None:
    import click

    from lifecycle.commands.verbs import Given

    command = cli.commands[verb]
    for param in command.params:
        if isinstance(param, click.Option) and (param.is_flag or param.name == "as_json"):
            continue
        if param.type is click.STRING:  # plain text: '' would pass as if the flag were not given
            pytest.fail(f"{verb} {param.opts[0]} takes any text, '' too: declare it type=GIVEN")
        if isinstance(param.type, Given):
            found = CliRunner().invoke(cli, [verb, *_blank(param)])
            assert found.exit_code == 2, (param.opts, found.output)


def _blank(param: object) -> list[str]:
    import click

    assert isinstance(param, click.Parameter)
    if isinstance(param, click.Argument):
        return [" "]
    return [param.opts[0], " "] + (["--remote"] if param.opts[0] in ("--from", "--grace") else [])


def test_an_unreadable_ledger_is_said_and_a_verb_that_needs_none_goes_on(repo_root: Path) -> None:
    from lifecycle.ledger import Ledger

    home = Path(os.environ["LIFECYCLE_HOME"])
    Ledger.open(home).close()
    (home / "ledger.sqlite3").write_bytes(b"not a ledger" * 100)
    result = CliRunner().invoke(cli, ["validate"])
    assert result.exit_code == 0, result.output
    assert "warning: cannot tell whether a night left production down" in result.stderr
    assert "is not a SQLite database" in result.stderr
    listing = CliRunner().invoke(cli, ["caches"])  # it needs the ledger: it fails on its own
    assert listing.exit_code != 0 and "not a SQLite database" in listing.stderr


def test_json_of_a_report_is_plain_data_whatever_its_fields_are() -> None:
    # Scalars are passed through first (a listing has millions); the rest is converted.
    from dataclasses import dataclass
    from enum import StrEnum
    from pathlib import PurePosixPath

    from lifecycle.report import plain

    class Mode(StrEnum):
        COLD = "cold"

    @dataclass(frozen=True)
    class Inner:
        mode: Mode
        where: PurePosixPath

    @dataclass(frozen=True)
    class Outer:
        name: str
        size: int
        ratio: float
        ok: bool
        none: None
        inner: Inner
        tags: frozenset[str]
        pairs: tuple[Inner, ...]

    inner = Inner(Mode.COLD, PurePosixPath("/var/cache"))
    data = plain(Outer("a", 3, 0.5, True, None, inner, frozenset({"y", "x"}), (inner,)))
    expected_inner = {"mode": "cold", "where": "/var/cache"}
    assert data == {
        "name": "a", "size": 3, "ratio": 0.5, "ok": True, "none": None,
        "inner": expected_inner, "tags": ["x", "y"], "pairs": [expected_inner],
    }  # fmt: skip
    assert type(data["inner"]["mode"]) is str  # the enum's value, not the member
    assert json.loads(json.dumps(data)) == data
