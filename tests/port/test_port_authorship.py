"""Patches written as mails keep their author, date, subject, body and trailers through a port."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from lifecycle.port import export
from tests.port_support import PatchSpec, Project, Upstream, change_mix, git

AUTHOR = "Ada Patcher <ada@downstream.invalid>"
MESSAGE = (
    "serve: mix with 37\n\n"
    "The kernel mixes better with 37 on our fleet; upstream keeps 31.\n\n"
    "Downstream-Ticket: OPS-1234\n"
    "Signed-off-by: Ada Patcher <ada@downstream.invalid>\n"
)


def _neighbour(number: int, text: str) -> Callable[[Upstream], None]:
    def change(u: Upstream) -> None:
        u.edit("pkg/serve.py", lambda t: t.replace(f"VALUE_{number:02d} = {number}\n", text))

    return change


def _applied_as_mail(up: Upstream, mail: bytes, tag: str, tmp_path: Path) -> str:
    """`git am` of the mail onto `tag` in a clone: author, date and message as git reads them."""
    clone = tmp_path / "am"
    git(tmp_path, "clone", "-q", str(up.path), str(clone))
    git(clone, "checkout", "-q", "--detach", tag)
    (tmp_path / "mail.patch").write_bytes(mail)
    git(clone, "am", "-q", "--directory=pkg", str(tmp_path / "mail.patch"))
    return git(clone, "log", "-1", "--format=%an <%ae>%n%aI%n%B")


def test_a_moved_mail_keeps_its_metadata_and_gains_a_port_trailer(
    up: Upstream, project: Project, tmp_path: Path
) -> None:
    mail = up.mail("v1.0.0", change_mix("37"), AUTHOR, MESSAGE)
    assert b"\n---\n pkg/serve.py | 2 +-\n" not in mail and b" serve.py | 2 +-\n" in mail
    assert re.search(rb"\n-- \n\d+\.\d+", mail)  # format-patch's version signature
    project.manifest("1.0", [PatchSpec("mix.patch", mail)])
    _neighbour(18, "VALUE_18 = 180\n")(up)  # context drift: the patch must be re-exported
    up.commit("Context drift")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.exit_code == 0, run.stderr
    assert run.outcomes() == {"patches/mix.patch": "CLEAN_3WAY"}
    ported = project.shown("port/2.0", "manifests/2.0/patches/mix.patch")
    head, _, diff = ported.partition(b"\n---\n")
    assert head.splitlines()[:4] == [
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001",
        b"From: Ada Patcher <ada@downstream.invalid>",
        b"Date: Sun, 1 Jun 2025 12:00:00 +0200",
        b"Subject: [PATCH] serve: mix with 37",
    ]
    assert head.endswith(
        b"\n\nThe kernel mixes better with 37 on our fleet; upstream keeps 31.\n\n"
        b"Downstream-Ticket: OPS-1234\n"
        b"Signed-off-by: Ada Patcher <ada@downstream.invalid>\n"
        b"Ported-From: 1.0 -> 2.0 (CLEAN_3WAY)"
    )
    # The pinned diff: no diffstat, no version signature, 12-digit index lines.
    assert diff.startswith(b"diff --git a/serve.py b/serve.py\nindex ")
    assert re.search(rb"(?m)^index [0-9a-f]{12}\.\.[0-9a-f]{12} 100644$", diff)
    assert b"\n-- \n" not in diff and b" VALUE_18 = 180\n" in diff
    # git reads it back as the same author, date and message, with the port's trailer.
    applied = _applied_as_mail(up, ported, "v2.0.0", tmp_path)
    assert applied == (
        f"{AUTHOR}\n2025-06-01T12:00:00+02:00\n{MESSAGE}Ported-From: 1.0 -> 2.0 (CLEAN_3WAY)\n\n"
    )


def test_an_unchanged_mail_is_byte_identical(up: Upstream, project: Project) -> None:
    mail = up.mail("v1.0.0", change_mix("37"), AUTHOR, MESSAGE)
    project.manifest("1.0", [PatchSpec("mix.patch", mail)])
    _neighbour(35, "VALUE_35 = 350\n")(up)  # the file's blob changes, the hunk does not move
    up.commit("Far from the patch")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.report["patches"][0]["unchanged"] is True
    assert project.shown("port/2.0", "manifests/2.0/patches/mix.patch") == mail


def test_a_resolved_mail_keeps_its_author_and_says_it_was_resolved(
    up: Upstream, project: Project, tmp_path: Path
) -> None:
    mail = up.mail("v1.0.0", change_mix("37"), AUTHOR, MESSAGE)
    project.manifest("1.0", [PatchSpec("mix.patch", mail)])
    change_mix("41")(up)
    up.commit("Upstream's own mix")
    up.tag("2.0.0")
    stopped = project.port("1.0", "2.0", "--json")
    worktree = Path(stopped.report["worktree"])
    git(worktree, "checkout", "--theirs", "--", "pkg/serve.py")

    done = project.port("--continue", "--json")

    assert done.exit_code == 0, done.stderr
    ported = project.shown("port/2.0", "manifests/2.0/patches/mix.patch")
    assert b"-MIX = 41\n+MIX = 37\n" in ported
    applied = _applied_as_mail(up, ported, "v2.0.0", tmp_path)
    assert applied.startswith(f"{AUTHOR}\n2025-06-01T12:00:00+02:00\nserve: mix with 37\n")
    assert applied.endswith(
        "Downstream-Ticket: OPS-1234\nSigned-off-by: Ada Patcher "
        "<ada@downstream.invalid>\nPorted-From: 1.0 -> 2.0 (RESOLVED)\n\n"
    )


def test_a_moved_plain_diff_stays_a_plain_diff_with_the_port_recorded_above_it(
    up: Upstream, project: Project
) -> None:
    def other(u: Upstream) -> None:
        u.edit("pkg/other.py", lambda t: t.replace("OTHER_5 = 5\n", "OTHER_5 = 55\n"))

    plain = up.patch("v1.0.0", change_mix("37"))
    # A DEP-3-style header above the diff, as Debian writes them: kept, the port added to it.
    described = b"Description: other with 55\nAuthor: Ada Patcher\n\n" + up.patch("v1.0.0", other)
    project.manifest("1.0", [PatchSpec("mix.patch", plain), PatchSpec("other.patch", described)])
    up.edit("pkg/serve.py", lambda t: "# header\n" + t)
    up.edit("pkg/other.py", lambda t: "# header\n" + t)
    up.commit("A line on top of both")
    up.tag("2.0.0")

    run = project.port("1.0", "2.0", "--json")

    assert run.outcomes() == {"patches/mix.patch": "CLEAN", "patches/other.patch": "CLEAN"}
    ported = project.shown("port/2.0", "manifests/2.0/patches/mix.patch")
    assert ported.startswith(
        b"Ported-From: 1.0 -> 2.0 (CLEAN)\n\ndiff --git a/serve.py b/serve.py\n"
    )
    ported_other = project.shown("port/2.0", "manifests/2.0/patches/other.patch")
    assert ported_other.startswith(
        b"Description: other with 55\nAuthor: Ada Patcher\nPorted-From: 1.0 -> 2.0 (CLEAN)\n\n"
        b"diff --git a/other.py b/other.py\n"
    )
    for patch in (ported, ported_other):
        checked = subprocess.run(
            ["git", "apply", "--check", "--directory=pkg", "-"],
            cwd=up.path,
            input=patch,
            capture_output=True,
        )
        assert checked.returncode == 0, checked.stderr


def test_a_header_without_a_blank_line_or_message_keeps_its_fields() -> None:
    # DEP-3 written as mail headers straight above `---`, and a mail with no body at all.
    dep3 = b"From: Ada <ada@x.invalid>\nSubject: mix\n---\ndiff --git a/f b/f\n"
    bare = (
        b"From: Ada <ada@x.invalid>\nSubject: [PATCH] mix\n\n---\n f | 2 +-\n\ndiff --git a/f b/f\n"
    )

    for original in (dep3, bare):
        ported = export.with_port(original, b"diff --git a/f b/f\nNEW\n", "Ported-From: 1 -> 2 (X)")

        assert ported == (
            export.ZERO_MBOX
            + original[: original.index(b"\n", original.index(b"Subject")) + 1]
            + b"\nPorted-From: 1 -> 2 (X)\n---\ndiff --git a/f b/f\nNEW\n"
        )
