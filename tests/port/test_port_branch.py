"""What a port writes: byte-stable patches, the new manifest, the branch, and nothing else."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from lifecycle.cli import cli
from lifecycle.home import Home
from lifecycle.manifest import load_manifest
from lifecycle.port.manifest_out import carry_tuned, manifest_data, render
from lifecycle.port.upstream import (
    base_image_pin,
    mirror_path,
    release_candidates,
    upstream_source,
)
from tests.port_support import PatchSpec, Project, Upstream, change_mix, git


def _other(u: Upstream) -> None:
    u.edit("pkg/other.py", lambda t: t.replace("OTHER_5 = 5\n", "OTHER_5 = 55\n"))


def _branch_files(project: Project, branch: str, directory: str) -> dict[str, bytes]:
    names = git(project.path, "ls-tree", "-r", "--name-only", branch, "--", directory).split()
    return {name: project.shown(branch, name) for name in names}


def _checkout(project: Project, branch: str, where: Path) -> Path:
    git(project.path, "worktree", "add", "-q", str(where), branch)
    return where / "manifests"


def test_porting_a_series_to_its_own_base_changes_nothing(up: Upstream, project: Project) -> None:
    mix = up.patch("v1.0.0", change_mix("37"))
    # Written by hand, without index lines: not the export format, kept as it is all the same.
    other = b"".join(
        line
        for line in up.patch("v1.0.0", _other).splitlines(True)
        if not line.startswith(b"index ")
    )
    project.manifest("1.0", [PatchSpec("mix.patch", mix), PatchSpec("other.patch", other)])

    run = project.port("1.0", "1.0-again", "--release", "1.0.0", "--json")

    assert run.exit_code == 0, run.stderr
    assert [(p["outcome"], p["unchanged"]) for p in run.report["patches"]] == [("CLEAN", True)] * 2
    for name, content in (("mix.patch", mix), ("other.patch", other)):
        assert project.shown("port/1.0-again", f"manifests/1.0-again/patches/{name}") == content
    assert {p["name"]: (p["old"], p["new"]) for p in run.report["pins"]} == {
        "vllm": ("1.0.0", "1.0.0"),
        "flashinfer": ("1.0.0", "1.0.0"),
        "base_image": ("toy/engine:v1.0.0", "toy/engine:v1.0.0"),
    }


def test_unchanged_patch_is_byte_identical_and_a_moved_one_is_refreshed(
    up: Upstream, project: Project
) -> None:
    mix, other = up.patch("v1.0.0", change_mix("37")), up.patch("v1.0.0", _other)
    project.manifest("1.0", [PatchSpec("mix.patch", mix), PatchSpec("other.patch", other)])
    # serve.py changes below the hunk (its blob id changes, its line numbers do not);
    # other.py gets two lines on top (the hunk moves down by two).
    up.edit("pkg/serve.py", lambda t: t.replace("VALUE_35 = 35\n", "VALUE_35 = 350\n"))
    up.edit("pkg/other.py", lambda t: "# one\n# two\n" + t)
    up.commit("Upstream work")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert [(p["outcome"], p["unchanged"]) for p in run.report["patches"]] == [
        ("CLEAN", True),
        ("CLEAN", False),
    ]
    assert project.shown("port/2.0", "manifests/2.0/patches/mix.patch") == mix
    moved = project.shown("port/2.0", "manifests/2.0/patches/other.patch")
    assert b"@@ -2,7 +2,7 @@" in other and b"@@ -4,7 +4,7 @@" in moved


def test_exporting_twice_gives_identical_bytes(up: Upstream, project: Project) -> None:
    project.manifest("1.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    up.edit("pkg/serve.py", lambda t: t.replace("VALUE_18 = 18\n", "VALUE_18 = 180\n"))
    up.commit("Context drift")
    up.tag("2.0.0")

    first = project.port("1.0", "2.0", "--branch", "port/first")
    second = project.port("1.0", "2.0", "--branch", "port/second")

    assert (first.exit_code, second.exit_code) == (0, 0)
    one = _branch_files(project, "port/first", "manifests/2.0")
    two = _branch_files(project, "port/second", "manifests/2.0")
    assert len(one) == 4 and one == two  # manifest, patch, report and range-diff


def test_the_users_checkout_index_and_branch_are_untouched(up: Upstream, project: Project) -> None:
    project.manifest("1.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    up.tag("2.0.0")
    (project.path / "notes.txt").write_text("committed\n")
    git(project.path, "add", "notes.txt")
    git(project.path, "commit", "-q", "-m", "notes")
    (project.path / "notes.txt").write_text("modified, not staged\n")
    (project.path / "staged.txt").write_text("staged\n")
    git(project.path, "add", "staged.txt")
    (project.path / "untracked.txt").write_text("untracked\n")
    dot_git = project.path / ".git"
    files = sorted(p for p in project.path.rglob("*") if p.is_file() and ".git" not in p.parts)
    before = {
        "HEAD": (dot_git / "HEAD").read_bytes(),
        "main": git(project.path, "rev-parse", "refs/heads/main"),
        "index": (dot_git / "index").read_bytes(),
        "files": {p: p.read_bytes() for p in files},
        "status": git(project.path, "status", "--porcelain"),
    }

    run = project.port("1.0", "2.0")

    assert run.exit_code == 0, run.stderr
    assert (dot_git / "HEAD").read_bytes() == before["HEAD"]
    assert git(project.path, "rev-parse", "refs/heads/main") == before["main"]
    assert (dot_git / "index").read_bytes() == before["index"]
    assert {p: p.read_bytes() for p in files} == before["files"]
    assert git(project.path, "status", "--porcelain") == before["status"]
    assert not (project.manifests / "2.0").exists()
    assert git(project.path, "rev-parse", "port/2.0^") == before["main"]  # on top of HEAD


def test_tuned_values_arrive_as_carried(up: Upstream, project: Project, tmp_path: Path) -> None:
    project.manifest("1.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    up.write("requirements.txt", "fakeinfer==2.1.0\nnumpy>=1\n")
    up.commit("Bump fakeinfer")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")
    assert run.report["tuned"] == {
        "gpu_memory_utilization": {"status": "carried", "carried_from": "1.0"}
    }
    manifests = _checkout(project, "port/2.0", tmp_path / "checkout")
    shown = CliRunner().invoke(cli, ["--manifests", str(manifests), "show", "2.0", "--json"])
    text = CliRunner().invoke(cli, ["--manifests", str(manifests), "show", "2.0"])

    tuned = json.loads(shown.stdout)["tuned"]["gpu_memory_utilization"]
    assert tuned == {
        "value": 0.9,
        "status": "carried",
        "carried_from": "1.0",
        "measured_on": "toy 1.0.0",
        "method": "utilization ladder",
        "margin": "1 GiB at the 64-prompt step",
        "note": None,
    }
    assert "NOT re-validated" in text.stdout
    pins = json.loads(shown.stdout)["pins"]
    assert (pins["vllm"], pins["flashinfer"], pins["base_image"]) == (
        "2.0.0",
        "2.1.0",
        "toy/engine:v2.0.0",
    )
    new = (manifests / "2.0/manifest.yaml").read_text()
    assert "extends: ../1.0/manifest.yaml\n" in new and 'carried_from: "1.0"' in new


def test_flashinfer_pin_missing_upstream_is_carried_and_flagged(
    up: Upstream, project: Project
) -> None:
    project.manifest("1.0", [])
    up.write("requirements.txt", "fakeinfer>=1.5\n")
    up.commit("Loosen fakeinfer")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    flashinfer = next(p for p in run.report["pins"] if p["name"] == "flashinfer")
    assert (flashinfer["new"], flashinfer["flagged"]) == ("1.0.0", True)
    assert "'fakeinfer>=1.5', not an exact pin" in flashinfer["source"]
    assert any("flashinfer 1.0.0: carried" in w for w in run.report["warnings"])
    header = project.shown("port/2.0", "manifests/2.0/manifest.yaml").decode().splitlines()[1]
    assert header.startswith("# flashinfer 1.0.0: carried")


def _lifecycle(manifests: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--manifests", str(manifests), *args])
    return result.exit_code, result.stdout, result.stderr


def test_a_pin_the_port_could_not_derive_blocks_the_build_until_confirmed(
    up: Upstream, project: Project, tmp_path: Path
) -> None:
    project.manifest("1.0", [])
    git(up.path, "rm", "-q", "requirements.txt")
    up.commit("No requirements file")
    up.tag("2.0.0")
    run = project.port("1.0", "2.0", "--json")
    assert run.exit_code == 0, run.stderr
    manifests = _checkout(project, "port/2.0", tmp_path / "checkout")
    file = manifests / "2.0/manifest.yaml"
    unconfirmed = yaml.safe_load(file.read_text())["engine"]["unconfirmed"]
    assert (
        list(unconfirmed) == ["flashinfer"] and "no requirement naming" in unconfirmed["flashinfer"]
    )

    code, out, err = _lifecycle(manifests, "validate", str(file))
    assert code == 0 and out.startswith("ok ")
    (warning,) = err.splitlines()
    assert warning.startswith("warning: ") and "engine.unconfirmed.flashinfer" in warning
    code, out, _ = _lifecycle(manifests, "show", "2.0")
    assert "# pin flashinfer=1.0.0 UNCONFIRMED" in out
    code, out, _ = _lifecycle(manifests, "show", "2.0", "--json")
    assert json.loads(out)["unconfirmed"] == unconfirmed
    for build in (["build", "2.0", "--dry-run"], ["build", "2.0"]):
        code, out, err = _lifecycle(manifests, *build)
        assert code == 2 and out == ""
        (line,) = err.splitlines()
        assert "flashinfer 1.0.0 is not confirmed" in line
        assert "delete engine.unconfirmed.flashinfer" in line

    # A person checks the pin and deletes the entry: the manifest builds.
    lines = file.read_text().splitlines(keepends=True)
    start = lines.index("  unconfirmed:\n")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("    "))
    file.write_text("".join(lines[:start] + lines[end:]))
    assert "unconfirmed" not in file.read_text()
    code, _, err = _lifecycle(manifests, "build", "2.0", "--dry-run", "--json")
    assert code == 0, err


@pytest.mark.parametrize(
    ("where", "text"),
    [
        (
            "toy-2.0.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: toy\nVersion: 2.0.0\nRequires-Dist: numpy>=1\n"
            "Requires-Dist: fakeinfer==2.1.0.post1\n",
        ),
        (
            "PKG-INFO",
            "Metadata-Version: 2.1\nName: toy\nRequires-Dist: fakeinfer (==2.1.0.post1)\n",
        ),
        ("setup.cfg", "[options]\ninstall_requires =\n    numpy>=1\n    fakeinfer==2.1.0.post1\n"),
    ],
)
def test_flashinfer_pin_is_read_from_package_metadata(
    up: Upstream, project: Project, where: str, text: str
) -> None:
    project.manifest("1.0", [])
    git(up.path, "rm", "-q", "requirements.txt")
    up.write(where, text)
    up.commit("A tree made from the release's wheel")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    flashinfer = next(p for p in run.report["pins"] if p["name"] == "flashinfer")
    assert (flashinfer["new"], flashinfer["flagged"]) == ("2.1.0.post1", False)
    assert flashinfer["source"] == f"{where} at v2.0.0"
    manifest = yaml.safe_load(project.shown("port/2.0", "manifests/2.0/manifest.yaml"))
    assert "unconfirmed" not in manifest["engine"]


def test_port_of_a_derived_manifest_extends_the_same_root(
    up: Upstream, project: Project, tmp_path: Path
) -> None:
    project.manifest("1.0", [])
    mix = up.patch("v1.0.0", change_mix("37"))
    up.edit("pkg/other.py", lambda t: t + "OTHER_31 = 31\n")
    up.commit("1.1 work")
    up.tag("1.1.0")
    derived = project.manifests / "1.1"
    (derived / "patches").mkdir(parents=True)
    (derived / "patches/mix.patch").write_bytes(mix)
    (derived / "manifest.yaml").write_text(
        "schema_version: 1\n"
        "extends: ../1.0/manifest.yaml\n"
        'engine: {vllm: "1.1.0", flashinfer: "1.0.0", base_image: "toy/engine:v1.1.0"}\n'
        "profiles: {serve: {command: [toy, serve], env: {TOY_LOG: debug}}}\n"
        "patches:\n  - file: patches/mix.patch\n    reason: ours\n"
        "tuned:\n  gpu_memory_utilization:\n    value: 0.9\n    status: carried\n"
        "    carried_from: '1.0'\n    measured_on: toy 1.0.0\n    method: utilization ladder\n"
    )
    git(project.path, "add", "-A")
    git(project.path, "commit", "-q", "-m", "1.1")
    up.tag("2.0.0")

    run = project.port("1.1", "2.0", "--json")

    assert run.exit_code == 0, run.stderr
    manifests = _checkout(project, "port/2.0", tmp_path / "checkout")
    written = (manifests / "2.0/manifest.yaml").read_text()
    assert "extends: ../1.0/manifest.yaml\n" in written  # the root: chains never grow
    loaded = load_manifest(manifests / "2.0/manifest.yaml")
    assert [p.name for p in loaded.chain] == ["manifest.yaml", "manifest.yaml"]
    assert loaded.manifest.profiles["serve"].env == {"TOY_LOG": "debug"}  # 1.1's own override
    tuned = loaded.manifest.tuned["gpu_memory_utilization"]
    assert (tuned.status, tuned.carried_from) == ("carried", "1.0")  # measured on 1.0, not 1.1
    assert loaded.manifest.engine.base_image == "toy/engine:v2.0.0"


def test_port_onto_an_existing_new_needs_force_and_keeps_what_it_validated(
    up: Upstream, project: Project
) -> None:
    project.manifest("1.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    up.tag("2.0.0")
    existing = project.manifest(
        "2.0", [PatchSpec("by-hand.patch", up.patch("v2.0.0", _other))], vllm="2.0.0"
    )
    text = (existing / "manifest.yaml").read_text()
    (existing / "manifest.yaml").write_text(
        text.replace("    value: 0.9\n", "    value: 0.88\n")
        + "  max_num_seqs:\n    value: 64\n    status: validated\n"
        "    measured_on: toy 2.0.0\n    method: burst\n"
    )
    git(project.path, "commit", "-q", "-am", "2.0 measured")

    refused = project.port("1.0", "2.0")

    assert refused.exit_code == 2
    assert "2.0 already exists" in refused.stderr and "--force" in refused.stderr
    assert len(refused.stderr.splitlines()) == 1
    assert git(project.path, "branch", "--list", "port/*") == ""
    dry = project.port("1.0", "2.0", "--dry-run", "--json")
    assert dry.exit_code == 0 and any("without --force" in w for w in dry.report["warnings"])
    run = project.port("1.0", "2.0", "--force", "--json")

    assert run.exit_code == 0, run.stderr
    assert sorted(_branch_files(project, "port/2.0", "manifests/2.0")) == [
        "manifests/2.0/manifest.yaml",
        "manifests/2.0/patches/mix.patch",
        "manifests/2.0/port-range-diff.txt",
        "manifests/2.0/port-report.json",
    ]
    assert (project.manifests / "2.0/patches/by-hand.patch").is_file()  # the checkout is as it was
    assert _branch_files(project, "port/2.0", "manifests/1.0") == _branch_files(
        project, "main", "manifests/1.0"
    )
    # What 2.0 validated stays validated, with its own measurement; nothing becomes carried.
    assert run.report["tuned"] == {
        "gpu_memory_utilization": {"status": "validated", "kept_from": "2.0"},
        "max_num_seqs": {"status": "validated", "kept_from": "2.0"},
    }
    written = yaml.safe_load(project.shown("port/2.0", "manifests/2.0/manifest.yaml"))
    assert written["tuned"]["gpu_memory_utilization"] == {
        "value": 0.88,
        "status": "validated",
        "measured_on": "toy 2.0.0",
        "method": "utilization ladder",
        "margin": "1 GiB at the 64-prompt step",
    }
    assert written["tuned"]["max_num_seqs"]["status"] == "validated"


def test_the_new_series_applies_the_way_the_build_applies_it(
    up: Upstream, project: Project, tmp_path: Path, repo_root: Path
) -> None:
    def add_plugin(u: Upstream) -> None:
        u.write("pkg/plugins/extra.py", "ENABLED = True\n")

    other = up.patch("v1.0.0", _other)
    # Mails too, as `git format-patch` writes them (diffstat, signature): one moves, one not.
    author = "Ada Patcher <ada@downstream.invalid>"
    mix = up.mail("v1.0.0", change_mix("37"), author, "serve: mix with 37\n")
    plugin = up.mail("v1.0.0", add_plugin, author, "plugins: extra\n")
    names = ["mix.patch", "plugin.patch", "other.patch"]
    project.manifest(
        "1.0", [PatchSpec(n, c) for n, c in zip(names, (mix, plugin, other), strict=True)]
    )
    git(up.path, "mv", "pkg/other.py", "pkg/others.py")
    up.edit("pkg/serve.py", lambda t: "# new header\n" + t.replace("VALUE_18 = 18\n", "V18 = 1\n"))
    up.commit("Rename, drift, offsets")
    up.tag("2.0.0")
    run = project.port("1.0", "2.0", "--json")
    assert run.outcomes() == {
        "patches/mix.patch": "CLEAN_3WAY",
        "patches/plugin.patch": "CLEAN",
        "patches/other.patch": "RENAMED",
    }

    # The package dir of the new release, then the build's own script (fuzz 0, in order).
    package = tmp_path / "image" / "pkg"
    archive = subprocess.run(
        ["git", "archive", "v2.0.0", "pkg"], cwd=up.path, capture_output=True, check=True
    ).stdout
    package.parent.mkdir()
    subprocess.run(["tar", "-x", "-C", str(package.parent)], input=archive, check=True)
    build = tmp_path / "build"
    (build / "patches").mkdir(parents=True)
    shutil.copy(repo_root / "lifecycle/build/in_image/apply-series.sh", build)
    series = ""
    for number, name in enumerate(names, start=1):
        content = project.shown("port/2.0", f"manifests/2.0/patches/{name}")
        (build / "patches" / f"{number:02d}-{name}").write_bytes(content)
        series += f"patches/{number:02d}-{name}\tpatches/{name}\n"
    (build / "series.tsv").write_text(series)
    applied = subprocess.run(
        ["sh", str(build / "apply-series.sh"), str(package)], capture_output=True, text=True
    )

    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "MIX = 37\n" in (package / "serve.py").read_text()
    assert "OTHER_5 = 55\n" in (package / "others.py").read_text()
    assert (package / "plugins/extra.py").read_text() == "ENABLED = True\n"


def test_a_port_of_the_production_031_manifest_would_extend_030(
    repo_root: Path, tmp_path: Path
) -> None:
    """No network here: the pieces of `port 0.31 0.32` that need none, on the real manifests."""
    manifests = tmp_path / "manifests"
    for release in ("0.30", "0.31"):
        shutil.copytree(repo_root / "manifests" / release, manifests / release)
    loaded = load_manifest(manifests / "0.31/manifest.yaml")
    assert upstream_source(loaded) == "https://github.com/vllm-project/vllm"
    assert mirror_path(Home(tmp_path), upstream_source(loaded)).name.startswith("vllm-")
    assert release_candidates("0.32", None) == ["0.32", "0.32.0"]
    image = base_image_pin(loaded.manifest.engine.base_image, "0.31.0", "0.32.0")
    assert (image.new, image.flagged) == ("vllm/vllm-openai:v0.32.0", False)

    shutil.copytree(manifests / "0.31/patches", manifests / "0.32/patches")
    tuned = carry_tuned(loaded.manifest.tuned, {"gpu_memory_utilization": "0.31"})
    engine = {"vllm": "0.32.0", "flashinfer": "0.7.0.post1", "base_image": image.new}
    data = manifest_data(loaded, manifests / "0.32", engine, loaded.manifest.patches, tuned)
    (manifests / "0.32/manifest.yaml").write_text(render(data, ["ported"]))

    assert data["extends"] == "../0.30/manifest.yaml"
    ported = load_manifest(manifests / "0.32/manifest.yaml").manifest
    assert (ported.engine.vllm, ported.engine.base_image) == ("0.32.0", "vllm/vllm-openai:v0.32.0")
    value = ported.tuned["gpu_memory_utilization"]
    assert (value.value, value.status, value.carried_from) == (0.94, "carried", "0.31")
    assert value.margin == loaded.manifest.tuned["gpu_memory_utilization"].margin
    assert ported.profiles == loaded.manifest.profiles


def _show_digest(manifests: Path, ref: str) -> str:
    shown = CliRunner().invoke(cli, ["--manifests", str(manifests), "show", ref, "--json"])
    assert shown.exit_code == 0, shown.stderr
    digest: str = json.loads(shown.stdout)["digest"]
    return digest


def test_the_report_records_the_digest_of_the_old_manifest(up: Upstream, project: Project) -> None:
    project.manifest("1.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 0, run.stderr
    recorded = json.loads(project.shown("port/2.0", "manifests/2.0/port-report.json"))
    assert recorded["from"]["digest"] == _show_digest(project.manifests, "1.0")
    assert recorded["from"]["uncommitted"] == []
    message = git(project.path, "log", "-1", "--format=%B", "port/2.0")
    assert f"sha256:{recorded['from']['digest']}" in message


def test_uncommitted_changes_to_old_are_refused_unless_allow_dirty(
    up: Upstream, project: Project, tmp_path: Path
) -> None:
    mix, other = up.patch("v1.0.0", change_mix("37")), up.patch("v1.0.0", _other)
    project.manifest("1.0", [PatchSpec("mix.patch", mix), PatchSpec("other.patch", other)])
    up.tag("2.0.0")
    manifest = project.manifests / "1.0/manifest.yaml"
    text = manifest.read_text()
    entry = "  - file: patches/other.patch\n    reason: test patch other.patch\n"
    manifest.write_text(text.replace(entry, ""))  # a patch taken out, not committed

    refused = project.port("1.0", "2.0")

    assert refused.exit_code == 2
    assert refused.stderr.splitlines() == [refused.stderr.strip()]  # one line
    assert "manifests/1.0/manifest.yaml" in refused.stderr and "--allow-dirty" in refused.stderr
    assert git(project.path, "branch", "--list", "port/*") == ""
    dry = project.port("1.0", "2.0", "--dry-run", "--json")
    assert dry.exit_code == 0 and any("--allow-dirty" in w for w in dry.report["warnings"])

    # A patch file changed alone is refused the same way.
    manifest.write_text(text)
    (project.manifests / "1.0/patches/mix.patch").write_bytes(mix.replace(b"MIX = 37", b"MIX = 38"))
    assert "manifests/1.0/patches/mix.patch" in project.port("1.0", "2.0").stderr

    # Also a value NEW inherits from OLD (its root): the branch holds HEAD's, not this one.
    manifest.write_text(text.replace(entry, "").replace("vllm_dist: toy", "vllm_dist: toy-dirty"))
    allowed = project.port("1.0", "2.0", "--allow-dirty", "--json")

    assert allowed.exit_code == 0, allowed.stderr
    assert allowed.outcomes() == {"patches/mix.patch": "CLEAN"}  # the working tree's series
    recorded = json.loads(project.shown("port/2.0", "manifests/2.0/port-report.json"))
    assert recorded["from"]["uncommitted"] == [
        "manifests/1.0/manifest.yaml",
        "manifests/1.0/patches/mix.patch",
    ]
    assert recorded["from"]["digest"] == _show_digest(project.manifests, "1.0")
    message = git(project.path, "log", "-1", "--format=%B", "port/2.0")
    assert "working tree" in message and "manifests/1.0/manifest.yaml" in message
    # The new manifest's digest is the one it has on the branch.
    manifests = _checkout(project, "port/2.0", tmp_path / "checkout")
    assert allowed.report["digest"] == _show_digest(manifests, "2.0")


def test_an_old_manifest_never_committed_is_refused(up: Upstream, project: Project) -> None:
    project.manifest("1.0", [], commit=False)
    (project.path / "README").write_text("a first commit without manifests\n")
    git(project.path, "add", "README")
    git(project.path, "commit", "-q", "-m", "readme")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0")

    assert run.exit_code == 2
    assert "manifests/1.0/manifest.yaml differ from HEAD" in run.stderr
    assert project.port("1.0", "2.0", "--allow-dirty").exit_code == 0
