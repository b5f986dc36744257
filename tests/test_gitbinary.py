"""The in-image helper for git's binary patches, against what git itself makes of a real repo."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

HELPER = Path(__file__).parents[1] / "lifecycle" / "build" / "in_image" / "gitbinary.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gitbinary", HELPER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gitbinary = _load()


def git(repo: Path, *args: str) -> bytes:
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00",
    }
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        check=True,
    ).stdout


def tree(repo: Path, rev: str, into: Path) -> Path:
    """The files of `rev` in a plain directory, as a package dir in an image holds them."""
    with tarfile.open(fileobj=io.BytesIO(git(repo, "archive", rev))) as archive:
        archive.extractall(into, filter="tar")
    return into


def files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode & 0o777)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """Commit `base` holds binary and text files; `patched` changes them every way a patch can."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    kernels = repo / "kernels"
    kernels.mkdir()
    big = bytearray(b"\0" + os.urandom(200_000))  # a NUL: git takes it for binary
    (kernels / "mix.cubin").write_bytes(big)
    (kernels / "old.cubin").write_bytes(b"\0" + os.urandom(3000))
    (kernels / "gone.bin").write_bytes(b"\0" + os.urandom(500))
    (kernels / "moves.bin").write_bytes(b"\0\1" * 4000)
    (repo / "ops.py").write_text("MIX = 31\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "tag", "base")
    big[1000:1010] = b"\xff" * 10  # a small change in a big file: git writes a delta
    (kernels / "mix.cubin").write_bytes(big)
    (kernels / "old.cubin").write_bytes(b"\0" + os.urandom(3000))  # all new: a literal
    (kernels / "gone.bin").unlink()
    (kernels / "new.so").write_bytes(b"\x7fELF\0" + os.urandom(700))
    (kernels / "new.so").chmod(0o755)
    (kernels / "moves.bin").rename(kernels / "moved.bin")
    (kernels / "moved.bin").write_bytes(b"\0\1" * 3990 + b"\2\3" * 10)  # renamed and changed
    (repo / "ops.py").write_text("MIX = 37\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "patched")
    return repo


def make_patch(repo: Path, path: Path) -> str:
    patch = git(
        repo, "diff", "--binary", "-M", "--src-prefix=a/", "--dst-prefix=b/", "base", "HEAD"
    )
    path.write_bytes(patch)
    return patch.decode("utf-8", "surrogateescape")


def test_text_to_patch_and_binary_here_give_what_git_committed(repo: Path, tmp_path: Path) -> None:
    patch_file = tmp_path / "series.patch"
    patch = make_patch(repo, patch_file)
    assert "\ndelta " in patch and "\nliteral " in patch  # both hunk kinds are exercised
    target = tree(repo, "base", tmp_path / "target")
    text = tmp_path / "text.patch"
    text.write_bytes(gitbinary.text_part(patch).encode("utf-8", "surrogateescape"))
    assert b"GIT binary patch" not in text.read_bytes() and b"MIX = 37" in text.read_bytes()
    assert len(gitbinary.binary_blocks(patch)) == 5  # every binary file: none went as text
    subprocess.run(["patch", "-p1", "--fuzz=0", "--batch", "-i", str(text)], cwd=target, check=True)
    gitbinary.apply(patch, target, check_only=False)
    assert files(target) == files(tree(repo, "HEAD", tmp_path / "expected"))


def test_a_wrong_base_is_refused_before_anything_is_written(repo: Path, tmp_path: Path) -> None:
    patch = make_patch(repo, tmp_path / "series.patch")
    target = tree(repo, "base", tmp_path / "target")
    (target / "kernels" / "mix.cubin").write_bytes(os.urandom(200_000))  # another build's file
    before = files(target)
    with pytest.raises(gitbinary.PatchError, match="not the file this patch was made from"):
        gitbinary.apply(patch, target, check_only=False)
    assert files(target) == before  # old.cubin, listed after it, untouched too


def test_the_command_line_says_what_failed_for_the_build_log(repo: Path, tmp_path: Path) -> None:
    patch_file = tmp_path / "series.patch"
    make_patch(repo, patch_file)
    target = tree(repo, "base", tmp_path / "target")
    (target / "kernels" / "new.so").write_bytes(b"already here")
    run = [sys.executable, str(HELPER), "apply", str(patch_file)]
    checked = subprocess.run([*run, "--check"], cwd=target, capture_output=True, text=True)
    assert checked.returncode == 1
    assert checked.stdout == "lifecycle:   binary: kernels/new.so: already exists\n"
    (target / "kernels" / "new.so").unlink()
    assert subprocess.run([*run, "--check"], cwd=target).returncode == 0
    assert (target / "kernels" / "old.cubin").read_bytes() == (
        tree(repo, "base", tmp_path / "base") / "kernels" / "old.cubin"
    ).read_bytes()  # --check wrote nothing


def test_a_binary_only_patch_leaves_no_text_for_patch(repo: Path, tmp_path: Path) -> None:
    git(repo, "rm", "-q", "--cached", "ops.py")
    patch = git(repo, "diff", "--binary", "-M", "base", "HEAD", "--", "kernels").decode(
        "utf-8", "surrogateescape"
    )
    assert gitbinary.text_part(patch) == ""
    assert gitbinary.binary_blocks(patch)


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (lambda line: "!" + line[1:], "corrupt binary line"),
        (lambda line: line[:-5], "short binary line|corrupt binary line|Error"),
    ],
)
def test_a_damaged_block_is_refused_in_words(
    repo: Path, tmp_path: Path, spoil: object, message: str
) -> None:
    patch = make_patch(repo, tmp_path / "series.patch")
    lines = patch.split("\n")
    first = lines.index("GIT binary patch") + 2
    lines[first] = spoil(lines[first])  # type: ignore[operator]
    target = tree(repo, "base", tmp_path / "target")
    broken = tmp_path / "broken.patch"
    broken.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape"))
    done = subprocess.run(
        [sys.executable, str(HELPER), "apply", str(broken), "--check"],
        cwd=target,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert done.stdout.startswith("lifecycle:   binary: ")
    assert "Traceback" not in done.stderr


def test_blob_ids_are_gits(tmp_path: Path) -> None:
    data = os.urandom(999)
    (tmp_path / "f").write_bytes(data)
    assert gitbinary.blob_id(data) == git(tmp_path, "hash-object", "f").decode().strip()
