"""The bad-input corpus: every case in tests/bad_input/ is one located error line, in bounded
time and memory, with nothing written to LIFECYCLE_HOME.

A case is a directory: `case.toml` says what to run and what to expect; its other files are
copied into a fresh working directory the command runs in. Keys of case.toml:

    about  = "what is wrong"                      # one line
    args   = ["validate", "manifest.yaml"]        # after `python3 -m lifecycle`
    exit   = 2                                    # the expected exit code
    stderr = ["manifest.yaml:6:3: engine.vllm: duplicate key"]  # each line's expected start
    stdout = "..."                                # optional: how stdout starts
    setup  = "name"                               # optional: a SETUPS function prepares it
    read_only_home = true                         # optional: LIFECYCLE_HOME read-only
    [env]                                         # optional: variables set for the command
    LIFECYCLE_DOCKER_TIMEOUT = "soon"

`{home}` and `{cwd}` in args, env, stdout and stderr stand for LIFECYCLE_HOME and the working
directory; `{too-long}` for a 5000-character file name in args and env, and in stdout and
stderr for that name as a line starts with it (clipped), `{too-long!r}` as a message quotes
it; `{not-utf8}` in args for an argument of bytes that are not UTF-8 (`caf\\xe9`). Every
command runs with Docker and S3 pointing at nothing that answers, so a case that reached either
would fail differently: the checks must need neither.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from lifecycle.errors import clip, quoted
from lifecycle.ledger import Ledger

CORPUS = Path(__file__).parent / "bad_input"
CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "case.toml").is_file())
MAX_SECONDS = 2.0
MAX_RSS_MB = 200
MAX_LINE_CHARS = 1000
KILL_AFTER_S = 30.0
REPO = Path(__file__).resolve().parent.parent
TOO_LONG = "a" * 5000  # longer than any file name a system takes (ENAMETOOLONG)
NOT_UTF8 = os.fsdecode(b"caf\xe9")  # Latin-1's é, as Python hands such an argument over

Setup = Callable[[Path, Path], None]  # (working directory, LIFECYCLE_HOME)
SETUPS: dict[str, Setup] = {}


def setup(name: str) -> Callable[[Setup], Setup]:
    """Register a case's preparation under `name` (what case.toml's `setup` names)."""

    def register(function: Setup) -> Setup:
        SETUPS[name] = function
        return function

    return register


@setup("patch-symlink-escape")
def _patch_symlink_escape(cwd: Path, home: Path) -> None:
    # A link inside the manifest's dir pointing outside it; made here, not committed.
    outside = cwd.parent / "outside.patch"
    outside.write_text("--- a/x\n+++ b/x\n")
    (cwd / "escape.patch").symlink_to(outside)


@setup("extends-symlink-loop")
def _extends_symlink_loop(cwd: Path, home: Path) -> None:
    (cwd / "a.yaml").symlink_to("b.yaml")
    (cwd / "b.yaml").symlink_to("a.yaml")


@setup("patch-symlink-loop")
def _patch_symlink_loop(cwd: Path, home: Path) -> None:
    (cwd / "a.patch").symlink_to("b.patch")
    (cwd / "b.patch").symlink_to("a.patch")


@setup("extends-too-long")
def _extends_too_long(cwd: Path, home: Path) -> None:
    (cwd / "manifest.yaml").write_text(f"# bad: extends a name too long\nextends: {TOO_LONG}\n")


@setup("demo-project")
def _demo_project(cwd: Path, home: Path) -> None:
    for part in ("manifests", "hooks"):
        shutil.copytree(REPO / part, cwd / part)


@setup("demo-night-repeats-huge")
def _demo_night_repeats_huge(cwd: Path, home: Path) -> None:
    # The demo night, which a dry run plans offline, with 1e20 runs of each cell to plan.
    for part in ("manifests", "hooks"):
        shutil.copytree(REPO / part, cwd / part)
    night = (REPO / "nights" / "demo.yaml").read_text()
    assert "\nrepeats: 1\n" in night, "the demo night's repeats moved: update this case"
    (cwd / "night.yaml").write_text(night.replace("\nrepeats: 1\n", f"\nrepeats: {10**20}\n"))


BASE = """\
schema_version: 1
name: demo
engine:
  vllm: "0.31.0"
  flashinfer: "0.7.0"
  base_image: demo:1
  package_dir: /opt/engine
upstream:
  repository: https://example.invalid/engine.git
"""


def _nested(cwd: Path, depth: int) -> None:
    brackets = "[" * depth + "]" * depth
    (cwd / "manifest.yaml").write_text(
        f"# bad: {depth} nested brackets\n{BASE}patches: {brackets}\n"
    )


@setup("nesting-5000")
def _nesting_5000(cwd: Path, home: Path) -> None:
    _nested(cwd, 5000)


@setup("nesting-200000")
def _nesting_200000(cwd: Path, home: Path) -> None:
    _nested(cwd, 200_000)


@setup("file-50mb")
def _file_50mb(cwd: Path, home: Path) -> None:
    line = "# " + "x" * 98 + "\n"
    with (cwd / "manifest.yaml").open("w") as out:
        out.write(BASE)
        for _ in range(500_000):
            out.write(line)


@setup("patch-too-long")
def _patch_too_long(cwd: Path, home: Path) -> None:
    patch = f"  - {{file: {TOO_LONG}, reason: r}}\n"
    (cwd / "manifest.yaml").write_text(f"# bad: a patch name too long\n{BASE}patches:\n{patch}")


@setup("manifests-with-broken-links")
def _manifests_with_broken_links(cwd: Path, home: Path) -> None:
    # A good manifest beside a manifest.yaml that is a dangling symlink and one that loops.
    for name in ("good", "dangling", "loop"):
        (cwd / "manifests" / name).mkdir(parents=True)
    (cwd / "manifests" / "good" / "manifest.yaml").write_text(BASE)
    (cwd / "manifests" / "dangling" / "manifest.yaml").symlink_to("gone.yaml")
    (cwd / "manifests" / "loop" / "manifest.yaml").symlink_to("again.yaml")
    (cwd / "manifests" / "loop" / "again.yaml").symlink_to("manifest.yaml")


@setup("manifest-is-a-fifo")
def _manifest_is_a_fifo(cwd: Path, home: Path) -> None:
    (cwd / "manifests" / "0.31").mkdir(parents=True)
    os.mkfifo(cwd / "manifests" / "0.31" / "manifest.yaml")


@setup("plan-is-a-fifo")
def _plan_is_a_fifo(cwd: Path, home: Path) -> None:
    os.mkfifo(cwd / "plan.json")


@setup("too-many-nodes")
def _too_many_nodes(cwd: Path, home: Path) -> None:
    patches = "".join(f"  - {{file: p{i}.patch, reason: r}}\n" for i in range(10_000))
    (cwd / "manifest.yaml").write_text(f"# bad: 10000 patches\n{BASE}patches:\n{patches}")


@setup("extends-1200")
def _extends_1200(cwd: Path, home: Path) -> None:
    names = ["manifest.yaml", *(f"m{i}.yaml" for i in range(1, 1200))]
    for name, parent in itertools.pairwise(names):
        (cwd / name).write_text(f"extends: {parent}\n")
    (cwd / names[-1]).write_text(BASE)


@setup("long-value")
def _long_value(cwd: Path, home: Path) -> None:
    text = BASE.replace('"0.31.0"', "'" + "x" * 500_000 + "'")
    (cwd / "manifest.yaml").write_text(f"# bad: a 500 KB version\n{text}")


@setup("many-problems")
def _many_problems(cwd: Path, home: Path) -> None:
    typos = "".join(f"  flashinfr{i}: x\n" for i in range(5000))
    text = BASE.replace('  flashinfer: "0.7.0"\n', "").replace("engine:\n", f"engine:\n{typos}")
    (cwd / "manifest.yaml").write_text(f"# bad: 5000 unknown keys\n{text}")


@setup("manifest-fifo")
def _manifest_fifo(cwd: Path, home: Path) -> None:
    os.mkfifo(cwd / "manifest.yaml")


@setup("deep-json")
def _deep_json(cwd: Path, home: Path) -> None:
    (cwd / "result.json").write_text("[" * 100_000 + "]" * 100_000)


@setup("deep-plan")
def _deep_plan(cwd: Path, home: Path) -> None:
    (cwd / "plan.json").write_text("[" * 100_000 + "]" * 100_000)


@setup("huge-plan")
def _huge_plan(cwd: Path, home: Path) -> None:
    # Sparse: no disk taken, and read as fast as memory is filled.
    with (cwd / "plan.json").open("wb") as plan:
        plan.truncate(300 * 2**20)


@setup("empty-home")
def _empty_home(cwd: Path, home: Path) -> None:
    home.mkdir()


@setup("home-is-a-file")
def _home_is_a_file(cwd: Path, home: Path) -> None:
    home.write_text("not a directory\n")


@setup("ledger")
def _ledger(cwd: Path, home: Path) -> None:
    Ledger.open(home).close()


@setup("ledger-garbage")
def _ledger_garbage(cwd: Path, home: Path) -> None:
    home.mkdir()
    (home / "ledger.sqlite3").write_bytes(random.Random(12).randbytes(8192))


@setup("ledger-truncated")
def _ledger_truncated(cwd: Path, home: Path) -> None:
    Ledger.open(home).close()
    ledger = home / "ledger.sqlite3"
    ledger.write_bytes(ledger.read_bytes()[: ledger.stat().st_size // 2])


@setup("ledger-newer")
def _ledger_newer(cwd: Path, home: Path) -> None:
    Ledger.open(home).close()
    with closing(sqlite3.connect(home / "ledger.sqlite3", isolation_level=None)) as conn:
        conn.execute("PRAGMA user_version = 99")


@setup("config-is-a-directory")
def _config_is_a_directory(cwd: Path, home: Path) -> None:
    (cwd / "lifecycle.yaml").mkdir()  # git keeps no empty dir: made here


@setup("ledger-is-a-directory")
def _ledger_is_a_directory(cwd: Path, home: Path) -> None:
    (home / "ledger.sqlite3").mkdir(parents=True)


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 60


@pytest.mark.parametrize("case", CASES)
def test_bad_input(case: str, tmp_path: Path) -> None:
    spec = tomllib.loads((CORPUS / case / "case.toml").read_text())
    cwd = tmp_path / "work"
    shutil.copytree(CORPUS / case, cwd, symlinks=True, ignore=shutil.ignore_patterns("case.toml"))
    home = tmp_path / "home"
    if "setup" in spec:
        SETUPS[spec["setup"]](cwd, home)
    before = _snapshot(home)

    def fill(text: str, *, told: bool = False) -> str:
        text = text.replace("{home}", str(home)).replace("{cwd}", str(cwd))
        if told:  # as the command's output names it
            text = text.replace("{too-long!r}", quoted(TOO_LONG))
            return text.replace("{too-long}", clip(TOO_LONG))
        return text.replace("{too-long}", TOO_LONG).replace("{not-utf8}", NOT_UTF8)

    env = _environment(tmp_path, home)
    env.update({name: fill(value) for name, value in spec.get("env", {}).items()})
    command = [sys.executable, "-m", "lifecycle", *map(fill, spec["args"])]
    if spec.get("read_only_home"):
        command = _on_read_only(home, command)

    rc, out, err, seconds, rss_mb = _measure(command, cwd, env, tmp_path)

    lines = err.splitlines()
    assert "Traceback" not in err, err
    assert max(map(len, lines), default=0) < MAX_LINE_CHARS, "an unbounded stderr line"
    assert rc == spec["exit"], f"exit {rc}, not {spec['exit']}:\n{err}"
    expected = [fill(line, told=True) for line in spec["stderr"]]
    assert len(lines) == len(expected), f"want {len(expected)} stderr lines, got:\n{err}"
    for got, want in zip(lines, expected, strict=True):
        assert got.startswith(want), f"\n got: {got}\nwant: {want}…"
    if "stdout" in spec:
        assert out.startswith(fill(spec["stdout"], told=True)), out
    assert _snapshot(home) == before, f"LIFECYCLE_HOME changed:\n{err}"
    assert seconds < MAX_SECONDS, f"took {seconds:.2f} s"
    assert rss_mb < MAX_RSS_MB, f"peak RSS {rss_mb:.0f} MB"


def _on_read_only(home: Path, command: list[str]) -> list[str]:
    """`command` with `home` read-only: root writes through permission bits, so as root a
    private mount namespace binds it read-only (EROFS), as anyone else chmod 555 does."""
    if os.geteuid() != 0:
        home.chmod(0o555)
        return command
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to make a read-only mount as root")
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        str(home),
        *command,
    ]


def _environment(tmp_path: Path, home: Path) -> dict[str, str]:
    """This environment without lifecycle's, Docker's or AWS's settings; services nowhere."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("LIFECYCLE_", "AWS_", "DOCKER_"))
    }
    env.update(
        HOME=str(tmp_path / "user"),
        LIFECYCLE_HOME=str(home),
        DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",  # discard: nothing listens
        AWS_ACCESS_KEY_ID="corpus",
        AWS_SECRET_ACCESS_KEY="corpus-secret",
        AWS_DEFAULT_REGION="us-east-1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    return env


def _measure(
    command: list[str], cwd: Path, env: dict[str, str], tmp_path: Path
) -> tuple[int, str, str, float, float]:
    """(exit code, stdout, stderr, wall seconds, peak RSS in MB) of one fresh process tree.

    os.wait4 gives this child's own resource usage (its peak RSS covers the children it
    waited for), where RUSAGE_CHILDREN would be the maximum over every child this test
    process ever had."""
    out_file, err_file = tmp_path / "stdout", tmp_path / "stderr"
    with out_file.open("wb") as out, err_file.open("wb") as err:
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=err)
        while True:  # polled, so that a case that hangs is killed instead of the whole run
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > KILL_AFTER_S:
                process.kill()
            time.sleep(0.005)
        seconds = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return (
        process.returncode,
        out_file.read_text(errors="replace"),
        err_file.read_text(errors="replace"),
        seconds,
        usage.ru_maxrss / 1024,
    )


def _snapshot(home: Path) -> dict[str, Any] | None:
    """Every path under `home` with its kind, mode and content digest; None if absent."""
    if not os.path.lexists(home):
        return None
    if not home.is_dir():
        return {".": ("file", home.stat().st_mode, hashlib.sha256(home.read_bytes()).hexdigest())}
    found: dict[str, Any] = {".": ("dir", home.stat().st_mode)}
    for path in sorted(home.rglob("*")):
        mode = path.lstat().st_mode
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(home))] = ("file", mode, _digest(path))
        else:
            found[str(path.relative_to(home))] = ("other", mode)
    return found


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
