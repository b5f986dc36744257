"""Runs inside the image being built (stdlib only): the binary files of a git patch.

GNU patch applies the text of a patch but refuses git's binary blocks ("GIT binary patch"),
which `lifecycle port` writes for binary files. So apply-series.sh hands patch the text:

    python3 gitbinary.py text PATCH          # the patch without its binary blocks, on stdout
    python3 gitbinary.py apply PATCH --check # could every binary block apply here? (cwd)
    python3 gitbinary.py apply PATCH         # apply them

A block applies only to the file it was made from: the file's git blob id must be the block's
old id, and the result's must be its new id, so a wrong base is refused, not patched into
something else. All blocks are checked before any file is written; each file is replaced by
rename. Problems are printed as "lifecycle:   ..." lines (the build shows them) and exit 1.
"""

import base64
import hashlib
import os
import re
import sys
import tempfile
import zlib
from pathlib import Path

_BLOCK = re.compile(r"(?m)^(?=diff --git )")
_ZERO = "0" * 40
_NEW_MODES = ("new file mode ", "new mode ")


class PatchError(Exception):
    """A binary block that cannot apply here, in words for the build log."""


class BinaryBlock:
    """One file's binary change: its paths, blob ids, and the forward hunk."""

    def __init__(self, text: str) -> None:
        lines = text.split("\n")
        header = re.fullmatch(r"diff --git a/(\S+) b/(\S+)", lines[0])
        if header is None:
            raise PatchError(f"cannot read the paths of: {lines[0]} (quoted or with spaces?)")
        self.old_path, self.new_path = header[1], header[2]
        self.deleted = any(line.startswith("deleted file mode ") for line in lines)
        self.copied = any(line.startswith("copy from ") for line in lines)
        modes = [line.rsplit(" ", 1)[1] for line in lines if line.startswith(_NEW_MODES)]
        self.mode = int(modes[-1], 8) & 0o7777 if modes else None
        index = next((line for line in lines if line.startswith("index ")), "")
        ids = re.match(r"index ([0-9a-f]{40})\.\.([0-9a-f]{40})", index)
        if ids is None:
            raise PatchError(f"{self.new_path}: no full blob ids on the index line")
        self.old_id, self.new_id = ids[1], ids[2]
        start = lines.index("GIT binary patch") + 1
        self.method, size = lines[start].split(" ")
        if self.method not in ("literal", "delta"):
            raise PatchError(f"{self.new_path}: unknown binary hunk {lines[start]!r}")
        self.size = int(size)
        data = []
        for line in lines[start + 1 :]:
            if not line:
                break
            data.append(_decode_line(line, self.new_path))
        self.data = zlib.decompress(b"".join(data))
        if self.method == "literal" and len(self.data) != self.size:
            raise PatchError(f"{self.new_path}: literal of {len(self.data)} bytes, not {self.size}")

    def result(self, root: Path) -> bytes | None:
        """The new content (None: the file goes), checked against both blob ids."""
        old = root / self.old_path
        if self.old_id == _ZERO:
            if old.exists() or old.is_symlink():
                raise PatchError(f"{self.new_path}: already exists")
            before = b""
        else:
            try:
                before = old.read_bytes()
            except OSError as exc:
                raise PatchError(f"{self.old_path}: {exc.strerror}") from exc
            if blob_id(before) != self.old_id:
                raise PatchError(f"{self.old_path}: not the file this patch was made from")
        if self.deleted:
            return None
        after = self.data if self.method == "literal" else apply_delta(before, self.data)
        if blob_id(after) != self.new_id:
            raise PatchError(f"{self.new_path}: the result is not the file the patch describes")
        return after


def binary_blocks(patch: str) -> list[str]:
    return [block for block in _BLOCK.split(patch) if _is_binary(block)]


def text_part(patch: str) -> str:
    """The patch without its binary blocks; empty when no text change is left."""
    blocks = _BLOCK.split(patch)
    kept = [block for block in blocks[1:] if not _is_binary(block)]
    return blocks[0] + "".join(kept) if kept else ""


def _is_binary(block: str) -> bool:
    return block.startswith("diff --git ") and "\nGIT binary patch\n" in block


def blob_id(data: bytes) -> str:
    """git's object id of a file with these bytes (sha1 of "blob <size>\\0" + bytes)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _decode_line(line: str, path: str) -> bytes:
    # First character: how many bytes the line holds (A-Z 1-26, a-z 27-52); then base85 in
    # git's alphabet, which is Python's b85 alphabet, padded to whole 5-character groups.
    code = line[0]
    if "A" <= code <= "Z":
        count = ord(code) - ord("A") + 1
    elif "a" <= code <= "z":
        count = ord(code) - ord("a") + 27
    else:
        raise PatchError(f"{path}: corrupt binary line {line[:20]!r}")
    try:
        decoded = base64.b85decode(line[1:])
    except ValueError as exc:
        raise PatchError(f"{path}: corrupt binary line {line[:20]!r}") from exc
    if len(decoded) < count:
        raise PatchError(f"{path}: short binary line {line[:20]!r}")
    return decoded[:count]


def apply_delta(source: bytes, delta: bytes) -> bytes:
    """git's delta format: the sizes, then copy-from-source and insert-literal instructions."""
    source_size, at = _varint(delta, 0)
    target_size, at = _varint(delta, at)
    if source_size != len(source):
        raise PatchError(f"delta made for {source_size} bytes, the file has {len(source)}")
    out = bytearray()
    while at < len(delta):
        op = delta[at]
        at += 1
        if op & 0x80:  # copy: bits 0-3 say which offset bytes follow, bits 4-6 which size bytes
            offset = size = 0
            for bit in range(4):
                if op & (1 << bit):
                    offset |= delta[at] << (8 * bit)
                    at += 1
            for bit in range(3):
                if op & (0x10 << bit):
                    size |= delta[at] << (8 * bit)
                    at += 1
            size = size or 0x10000
            if offset + size > len(source):
                raise PatchError("delta copies beyond the end of the file")
            out += source[offset : offset + size]
        elif op:  # insert the next `op` bytes
            out += delta[at : at + op]
            at += op
        else:
            raise PatchError("delta holds a reserved instruction")
    if len(out) != target_size:
        raise PatchError(f"delta gave {len(out)} bytes, not {target_size}")
    return bytes(out)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def apply(patch: str, root: Path, check_only: bool) -> None:
    """Check every binary block against the files under `root`; then, unless checking, write."""
    changes = []
    for text in binary_blocks(patch):
        block = BinaryBlock(text)
        changes.append((block, block.result(root)))
    if check_only:
        return
    for block, content in changes:
        moved = block.old_path != block.new_path and not block.copied
        if content is not None:
            _replace(root / block.new_path, content, block.mode)
        if moved or content is None:
            (root / block.old_path).unlink(missing_ok=True)


def _replace(path: Path, content: bytes, mode: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        temp.chmod(mode)
        temp.replace(path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("text", "apply"):
        print(__doc__, file=sys.stderr)
        return 2
    # surrogateescape both ways: the text part goes to patch with the very bytes it came with.
    patch = Path(argv[1]).read_bytes().decode("utf-8", "surrogateescape")
    if argv[0] == "text":
        sys.stdout.buffer.write(text_part(patch).encode("utf-8", "surrogateescape"))
        return 0
    try:
        apply(patch, Path.cwd(), check_only="--check" in argv[2:])
    except (PatchError, zlib.error, IndexError, ValueError) as exc:
        print(f"lifecycle:   binary: {exc}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
