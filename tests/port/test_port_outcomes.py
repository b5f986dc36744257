"""One upstream history per outcome: what `lifecycle port` says about each patch, and why."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from tests.port_support import SUBDIR, PatchSpec, Project, Upstream, change_mix, git
from tests.test_gitbinary import git as git_bytes
from tests.test_gitbinary import gitbinary


def _lines(change: dict[int, str]) -> Callable[[Upstream], None]:
    """A change replacing serve.py's line N (1-based) with the given text."""

    def apply(up: Upstream) -> None:
        def edit(text: str) -> str:
            lines = text.splitlines(keepends=True)
            for number, line in change.items():
                lines[number - 1] = line
            return "".join(lines)

        up.edit("pkg/serve.py", edit)

    return apply


def test_identical_change_upstream_is_dropped_by_patch_id(up: Upstream, project: Project) -> None:
    project.manifest("1.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    up.edit("pkg/other.py", lambda t: t + "OTHER_31 = 31\n")
    up.commit("Unrelated")
    change_mix("37")(up)
    fixed = up.commit("Use 37 for the mix")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 0, run.stderr
    (patch,) = run.report["patches"]
    assert patch["outcome"] == "DROPPED_UPSTREAM"
    assert patch["dropped"] == {
        "method": "patch-id",
        "commit": fixed,
        "subject": "Use 37 for the mix",
    }
    manifest = project.shown("port/2.0", "manifests/2.0/manifest.yaml").decode()
    assert "patches: []" in manifest
    assert "manifests/2.0/patches/mix.patch" not in run.report["files"]
    # DEP-3's field says where the change went, in the report and in the branch's history.
    assert patch["applied_upstream"] == fixed
    trailers = "%(trailers:key=Applied-Upstream,valueonly)"
    recorded = git(project.path, "log", "-1", f"--format={trailers}", "port/2.0")
    assert recorded.strip() == f"{fixed} (patches/mix.patch, patch-id)"
    reasons = project.shown("port/2.0", "manifests/2.0/port-range-diff.txt").decode()
    assert f"#   Applied-Upstream: {fixed} (patch-id)\n" in reasons


def test_backport_on_a_release_branch_is_dropped_by_reverse_apply(
    up: Upstream, project: Project
) -> None:
    patch = up.patch("v1.0.0", change_mix("37"))
    change_mix("37")(up)
    up.write("tests/test_mix.py", "def test_mix():\n    assert True\n")
    on_main = up.commit("Fix the mix, with a test")
    project.manifest("1.0", [PatchSpec("mix.patch", patch, upstream_commit=on_main)])
    git(up.path, "checkout", "-q", "-b", "release/2.0", "v1.0.0")
    up.edit("pkg/other.py", lambda t: t.replace("OTHER_3 = 3\n", "OTHER_3 = 33\n"))
    up.commit("Release branch fix")
    git(up.path, "cherry-pick", "-x", on_main)  # a different commit: another parent and message
    backport = git(up.path, "rev-parse", "HEAD").strip()
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 0, run.stderr
    (result,) = run.report["patches"]
    assert result["outcome"] == "DROPPED_UPSTREAM"
    # Not `ancestor` (the recorded main commit is not in v2.0.0), not `patch-id` (the backport
    # carries a test file too): the change itself is found in the tree.
    assert result["dropped"]["method"] == "reverse-apply"
    assert result["dropped"]["commit"] == backport


def test_recorded_upstream_commit_in_the_new_tag_is_dropped_by_ancestor(
    up: Upstream, project: Project
) -> None:
    patch = up.patch("v1.0.0", change_mix("37"))
    change_mix("37")(up)
    up.write("tests/test_mix.py", "def test_mix():\n    assert True\n")
    fixed = up.commit("Fix the mix, with a test")
    up.tag("2.0.0")
    project.manifest("1.0", [PatchSpec("mix.patch", patch, upstream_commit=fixed[:12])])

    run = project.port("1.0", "2.0", "--json")

    (result,) = run.report["patches"]
    assert result["outcome"] == "DROPPED_UPSTREAM"
    assert result["dropped"]["method"] == "ancestor"
    assert result["dropped"]["commit"] == fixed
    message = git(project.path, "log", "-1", "--format=%B", "port/2.0")
    assert f"\nApplied-Upstream: {fixed} (patches/mix.patch, ancestor)\n" in message


def test_upstream_superset_fix_is_a_conflict_with_a_hint_not_a_drop(
    up: Upstream, project: Project
) -> None:
    patch = up.patch("v1.0.0", change_mix("37"))
    project.manifest("1.0", [PatchSpec("mix.patch", patch, drop_when="upstream fixes the mix")])
    _lines({19: "VALUE_19 = 190\n", 20: "MIX = 37\n", 21: "VALUE_21 = 210\n"})(up)
    superset = up.commit("Rework the mix and its neighbours")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 1
    (result,) = run.report["patches"]
    assert result["outcome"] == "CONFLICT"
    assert result["conflict"]["kind"] == "content"
    assert result["conflict"]["files"] == [{"path": "serve.py", "kind": "content"}]
    hint = result["conflict"]["hint"]
    assert superset[:12] in hint and "Rework the mix" in hint
    assert "drop_when: upstream fixes the mix" in hint
    assert "dropped" not in result


def test_context_drift_is_clean_3way(up: Upstream, project: Project) -> None:
    project.manifest("1.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    _lines({17: "VALUE_17 = 1700\n"})(up)  # inside the patch's context, not on its change
    up.commit("Change a neighbour")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 0, run.stderr
    assert run.outcomes() == {"patches/mix.patch": "CLEAN_3WAY"}
    exported = project.shown("port/2.0", "manifests/2.0/patches/mix.patch").decode()
    assert " VALUE_17 = 1700\n" in exported and "+MIX = 37\n" in exported


def test_file_renamed_upstream(up: Upstream, project: Project) -> None:
    project.manifest("1.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    git(up.path, "mv", "pkg/serve.py", "pkg/server.py")
    up.edit("pkg/server.py", lambda t: t.replace("VALUE_02 = 2\n", "VALUE_02 = 22\n"))
    up.commit("Rename serve.py")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 0, run.stderr
    (result,) = run.report["patches"]
    assert result["outcome"] == "RENAMED"
    assert result["renamed"] == [{"old": "serve.py", "new": "server.py"}]
    exported = project.shown("port/2.0", "manifests/2.0/patches/mix.patch").decode()
    assert exported.startswith(
        "Ported-From: 1.0 -> 2.0 (RENAMED)\n\ndiff --git a/server.py b/server.py\n"
    )


def test_new_file_added_by_the_patch_is_clean(up: Upstream, project: Project) -> None:
    def add_plugin(u: Upstream) -> None:
        u.write("pkg/plugins/extra.py", '"""Ours."""\n\nENABLED = True\n')

    patch = up.patch("v1.0.0", add_plugin)
    project.manifest("1.0", [PatchSpec("extra.patch", patch)])
    _lines({5: "VALUE_05 = 50\n"})(up)
    up.commit("Upstream work")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    (result,) = run.report["patches"]
    assert (result["outcome"], result["unchanged"]) == ("CLEAN", True)
    assert project.shown("port/2.0", "manifests/2.0/patches/extra.patch") == patch


def test_file_deleted_upstream_is_a_modify_delete_conflict(up: Upstream, project: Project) -> None:
    def edit_other(u: Upstream) -> None:
        u.edit("pkg/other.py", lambda t: t.replace("OTHER_5 = 5\n", "OTHER_5 = 55\n"))

    project.manifest("1.0", [PatchSpec("other.patch", up.patch("v1.0.0", edit_other))])
    git(up.path, "rm", "-q", "pkg/other.py")
    up.commit("Remove other.py")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 1
    (result,) = run.report["patches"]
    assert result["outcome"] == "CONFLICT"
    assert result["conflict"]["kind"] == "modify/delete"
    assert result["conflict"]["files"] == [{"path": "other.py", "kind": "modify/delete"}]
    assert "Remove other.py" in result["conflict"]["hint"]
    assert result["conflict"]["hint"].startswith("upstream deleted other.py in ")


def test_a_modify_delete_hint_names_the_file_that_replaced_it(
    up: Upstream, project: Project
) -> None:
    def edit_other(u: Upstream) -> None:
        u.edit("pkg/other.py", lambda t: t.replace("OTHER_5 = 5\n", "OTHER_5 = 55\n"))

    project.manifest("1.0", [PatchSpec("other.patch", up.patch("v1.0.0", edit_other))])
    # Moved and rewritten too much for git to call it a rename (under 50 % alike).
    kept = "".join(f"OTHER_{n} = {n}\n" for n in range(1, 13))
    up.write("pkg/others/base.py", kept + "".join(f"NEW_{n} = {n}\n" for n in range(13, 31)))
    git(up.path, "rm", "-q", "pkg/other.py")
    moved = up.commit("Split other.py into a package")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    (result,) = run.report["patches"]
    assert result["conflict"]["kind"] == "modify/delete"
    hint = result["conflict"]["hint"]
    assert hint.startswith(f"upstream deleted other.py in {moved[:12]} 'Split other.py")
    assert "others/base.py" in hint and "% alike" in hint


def test_an_add_add_hint_says_upstream_added_the_file(up: Upstream, project: Project) -> None:
    def add_plugin(u: Upstream) -> None:
        u.write("pkg/plugins/extra.py", '"""Ours."""\n\nENABLED = True\n')

    project.manifest("1.0", [PatchSpec("extra.patch", up.patch("v1.0.0", add_plugin))])
    up.write("pkg/plugins/extra.py", '"""Upstream\'s."""\n\nENABLED = False\n')
    added = up.commit("Add the extra plugin")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    (result,) = run.report["patches"]
    assert result["conflict"]["kind"] == "add/add"
    assert result["conflict"]["hint"].startswith(
        f"upstream added plugins/extra.py in {added[:12]} 'Add the extra plugin'"
    )


def test_the_range_diff_shows_patches_that_left_as_gone_not_as_added(
    up: Upstream, project: Project
) -> None:
    def other(number: int, value: str) -> Callable[[Upstream], None]:
        def change(u: Upstream) -> None:
            u.edit(
                "pkg/other.py",
                lambda t: t.replace(f"_{number} = {number}\n", f"_{number} = {value}\n"),
            )

        return change

    project.manifest(
        "1.0",
        [
            PatchSpec("first.patch", up.patch("v1.0.0", other(5, "55"))),
            PatchSpec("emptied.patch", up.patch("v1.0.0", change_mix("37"))),
            PatchSpec("dropped.patch", up.patch("v1.0.0", other(9, "99"))),
            PatchSpec("last.patch", up.patch("v1.0.0", other(25, "250"))),
        ],
    )
    _lines({18: "VALUE_18 = 180\n", 20: "MIX = 37\n", 23: "VALUE_23 = 230\n"})(up)
    up.commit("Rework")
    other(9, "99")(up)
    up.commit("Use 99")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.outcomes() == {
        "patches/first.patch": "CLEAN",
        "patches/emptied.patch": "EMPTIED",
        "patches/dropped.patch": "DROPPED_UPSTREAM",
        "patches/last.patch": "CLEAN",
    }
    text = project.shown("port/2.0", "manifests/2.0/port-range-diff.txt").decode()
    pairs = [line for line in text.splitlines() if re.match(r"\d+: ", line)]
    assert [line.split()[2] for line in pairs] == ["=", "<", "<", "="]
    assert pairs[1].endswith("patches/emptied.patch (EMPTIED)")
    assert pairs[2].endswith("patches/dropped.patch (DROPPED_UPSTREAM)")
    assert pairs[3].split()[3] == "2:"  # the new series holds two patches, numbered 1 and 2


def _flip_bytes(u: Upstream) -> None:
    data = bytearray((u.path / "pkg/data.bin").read_bytes())
    data[10:14] = b"\xff\x00\xfe\x01"
    u.write("pkg/data.bin", bytes(data))


def test_binary_patch_unchanged_upstream_is_clean_and_byte_identical(
    up: Upstream, project: Project, tmp_path: Path
) -> None:
    patch = up.patch("v1.0.0", _flip_bytes)
    assert b"GIT binary patch" in patch
    project.manifest("1.0", [PatchSpec("data.patch", patch)])
    _lines({30: "VALUE_30 = 300\n"})(up)
    up.commit("Upstream work elsewhere")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 0, run.stderr
    (result,) = run.report["patches"]
    assert (result["outcome"], result["unchanged"]) == ("CLEAN", True)
    assert project.shown("port/2.0", "manifests/2.0/patches/data.patch") == patch
    # And the build can apply it: the in-image helper, on release 2.0's package dir.
    package = tmp_path / "image" / SUBDIR
    package.mkdir(parents=True)
    for rel in git(up.path, "ls-files", SUBDIR).split():
        (package.parent / rel).write_bytes(git_bytes(up.path, "show", f"v2.0.0:{rel}"))
    gitbinary.apply(patch.decode("utf-8", "surrogateescape"), package, check_only=False)
    expected = bytearray(git_bytes(up.path, "show", f"v2.0.0:{SUBDIR}/data.bin"))
    expected[10:14] = b"\xff\x00\xfe\x01"
    assert (package / "data.bin").read_bytes() == bytes(expected)


def test_binary_file_changed_upstream_too_is_a_binary_conflict(
    up: Upstream, project: Project
) -> None:
    project.manifest("1.0", [PatchSpec("data.patch", up.patch("v1.0.0", _flip_bytes))])
    up.write("pkg/data.bin", b"\x00upstream rewrote it\x00")
    up.commit("New data")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 1
    (result,) = run.report["patches"]
    assert result["conflict"]["kind"] == "binary"


def test_change_already_there_without_a_commit_to_name_is_emptied(
    up: Upstream, project: Project
) -> None:
    project.manifest("1.0", [PatchSpec("mix.patch", up.patch("v1.0.0", change_mix("37")))])
    # Upstream makes the same change inside a larger rewrite of the context: the 3-way replay
    # comes out empty, yet neither patch-id nor a strict reverse-apply ties it to a commit.
    _lines({18: "VALUE_18 = 180\n", 20: "MIX = 37\n", 23: "VALUE_23 = 230\n"})(up)
    rework = up.commit("Rework")
    up.edit("pkg/serve.py", lambda t: t.replace("VALUE_35 = 35\n", "VALUE_35 = 350\n"))
    up.commit("Later work on the same file")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 0, run.stderr
    (result,) = run.report["patches"]
    assert result["outcome"] == "EMPTIED"
    # Not evidence enough to call it dropped, but the commit that wrote the lines is named.
    assert result["related_upstream"] == {
        "commit": rework,
        "subject": "Rework",
        "how": "wrote the lines the patch adds",
    }
    assert f"upstream {rework[:12]} 'Rework' wrote the lines the patch adds" in result["note"]
