"""Error families the CLI renders as one line each, with the exit code of their family
(EXIT_CODES says what each code means; `lifecycle --help` shows it)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

EXIT_OK = 0
EXIT_NO = 1
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3
EXIT_INTERNAL = 4

# A file can hold thousands of mistakes (one per line of a generated manifest); the first ones
# are what a reader acts on, so the rest are counted, not printed.
MAX_PROBLEM_LINES = 20
MAX_MESSAGE_CHARS = 300  # a key or value quoted in a message can be a megabyte long
MAX_QUOTED_CHARS = 100  # a name quoted inside a message, so that what follows it survives
MAX_LINE_CHARS = 900  # a line on stderr: an error quoting two S3 URLs fits whole, a 5 KB value not

EXIT_CODES = (
    (EXIT_OK, "ok"),
    (EXIT_NO, "the answer is no: differs, conflicts, engine failed, not archived, refused"),
    (EXIT_USAGE, "bad input or usage: a manifest, a flag, a record that does not parse"),
    (
        EXIT_ENVIRONMENT,
        "the environment failed: Docker or S3 unreachable or too slow, home unusable",
    ),
    (EXIT_INTERNAL, "an unexpected error: one line here, the traceback in a file it names"),
)


def did_you_mean(name: str, known: Iterable[str], otherwise: str = "") -> str:
    """`; did you mean 'x'?` for the known name closest to a mistyped one, else `otherwise`."""
    import difflib  # here: every command loads this module, few need a hint

    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else otherwise


class LifecycleError(Exception):
    """Base of every error a user can act on; the CLI prints it without a traceback."""

    exit_code = EXIT_USAGE

    def lines(self) -> list[str]:
        """The message as the lines the CLI prints."""
        return [str(self)]


class AnswerNo(LifecycleError):
    """The command ran, and the answer is no (exit 1)."""

    exit_code = EXIT_NO


class EnvironmentFailure(LifecycleError):
    """Something the tool needs is not there or does not answer in time (exit 3)."""

    exit_code = EXIT_ENVIRONMENT


# The errnos of a write that found no room: the file system is full, or the user's quota is.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


def no_room(exc: OSError) -> bool:
    """Whether `exc` is a write that found its file system (or the user's quota) full."""
    return exc.errno in _NO_ROOM


class DiskFull(EnvironmentFailure):
    """A write found no room where it writes (ENOSPC, EDQUOT; SQLite's SQLITE_FULL): exit 3,
    not a bug. What was half written is gone or set aside for the next run: once space is
    freed, running the command again completes it."""

    def __init__(self, path: Path | str, context: str = "") -> None:
        self.path, self.context = path, context
        where = f"{context}: {path}" if context else str(path)
        super().__init__(
            f"{where}: no space left on device (the disk is full); free space and run it again"
        )

    def within(self, context: str) -> DiskFull:
        """The same error with its context first (what was being done when the disk filled)."""
        return DiskFull(self.path, f"{context}: {self.context}" if self.context else context)


class Problem(NamedTuple):
    """One fault in one file, located as precisely as the YAML lets us. (A tuple, not a
    dataclass: `lifecycle --help` loads this module, and dataclasses with it would cost.)"""

    file: Path
    line: int
    col: int
    key_path: str
    message: str

    def render(self) -> str:
        """`path:line:col: key.path: message`, the form editors and CI annotators parse."""
        where = f"{clip(str(self.file))}:{self.line}:{self.col}: {clip(self.key_path)}"
        return f"{where}: {clip(self.message)}"


def problem_lines(problems: list[Problem] | tuple[Problem, ...]) -> list[str]:
    """The first MAX_PROBLEM_LINES problems rendered, then one line counting the rest."""
    lines = [p.render() for p in problems[:MAX_PROBLEM_LINES]]
    if len(problems) > MAX_PROBLEM_LINES:
        files = sorted({str(p.file) for p in problems[MAX_PROBLEM_LINES:]})
        more = len(problems) - MAX_PROBLEM_LINES
        lines.append(f"lifecycle: {more} more problems in {', '.join(files)} not shown")
    return lines


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text`, or its start and its length when it is longer than `limit` characters."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 20]}… ({len(text)} characters)"


def clip_line(line: str, limit: int = MAX_LINE_CHARS) -> str:
    """A line for stderr of at most about `limit` characters: its start and its end, where a
    message says its point (`… in this host's ledger`), and how much
    was left out between. A value given on the command line can be any length, and the
    messages that echo it (click's own among them) are more than any one place can clip."""
    if len(line) <= limit:
        return line
    head, tail = line[: limit * 2 // 3], line[-(limit // 4) :]
    return f"{head}… ({len(line) - len(head) - len(tail)} characters left out) …{tail}"


def quoted(text: str) -> str:
    """`text` quoted as a message names a value or a path, clipped short enough that the
    message's point, after it, is not clipped away with it."""
    return repr(clip(text, MAX_QUOTED_CHARS))


def path_fault(path: Path) -> str | None:
    """Why nothing can be read at `path` as written (a NUL byte in it, a name longer than the
    system takes, a symlink loop, a dir it may not enter), or None: it can be looked at, though
    nothing may be there. pathlib's is_file() and resolve() raise on these instead of answering."""
    try:
        path.stat()
    except ValueError:
        return "a path cannot hold a NUL byte"
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def not_yours(path: str | Path, exc: OSError) -> str:
    """Why lifecycle's user may not read `path`, with the way out, for the line of `exc` to end
    with; empty unless `exc` is a refusal (EACCES, EPERM) and `path` can be looked at: an
    engine that ran as root wrote it, as another user (lifecycle.boot.owner gives a boot's
    caches back), or its own mode shuts it."""
    if exc.errno not in (errno.EACCES, errno.EPERM):
        return ""
    try:
        st = os.lstat(path)
    except OSError:
        return ""
    mode, uid, gid = stat.S_IMODE(st.st_mode), os.getuid(), os.getgid()
    if st.st_uid == uid:
        return f" (mode {mode:04o}); let its owner read it (chmod -R u+rX) and run it again"
    return (
        f" (uid {st.st_uid}'s, mode {mode:04o}; lifecycle runs as uid {uid}): written as"
        f" another user, as by an engine running as root; give the cache dir back to uid"
        f" {uid} (as root: chown -R {uid}:{gid} on it) and run it again"
    )


def read_regular(path: Path, cap: int) -> bytes | None:
    """The bytes of the regular file at `path`; None when what is there is no regular file (a
    FIFO is not waited on, /dev/zero not read: neither would ever end). ValueError when it
    holds more than `cap` bytes (or the path a NUL byte); OSError as the system says."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: no wait
    with os.fdopen(fd, "rb") as handle:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            return None
        # Said from its size when it can be: reading `cap` bytes to refuse them took as much
        # memory (a 300 MiB plan: 300 MB). Read too, bounded: a file may grow meanwhile.
        data = b"" if found.st_size > cap else handle.read(cap + 1)
    if found.st_size > cap or len(data) > cap:
        raise ValueError(f"larger than {cap // 2**20} MiB")
    return data


def read_given(path: Path, where: str, cap: int) -> bytes:
    """The bytes of a file the user named (`where` names it in messages): a regular file of at
    most `cap` bytes, else one line saying which it is not."""
    try:
        data = read_regular(path, cap)
    except OSError as exc:
        raise LifecycleError(f"cannot read {where}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise LifecycleError(f"{where}: {exc}") from None
    if data is None:
        raise LifecycleError(f"{where}: not a regular file")
    return data


def check_replaceable(path: Path, what: str, marker: str) -> None:
    """Before any work: an output file the user named replaces only one written as `what`
    before (`marker` in its first bytes: planning or auditing again is the routine), never
    another file a slip named (`-o lifecycle.yaml`); one line otherwise."""
    if not os.path.lexists(path):
        return
    head = b""
    if path.is_file():  # not a FIFO: a read would wait on it for ever
        try:
            with path.open("rb") as existing:
                head = existing.read(256)
        except OSError as exc:
            raise LifecycleError(f"cannot write {what} to {path}: {exc.strerror}") from None
    if marker.encode() not in head:
        raise LifecycleError(
            f"{path} exists and is not {what}: not replaced (remove it, or name another file)"
        )


class ManifestError(LifecycleError):
    """A manifest (or lifecycle.yaml) that cannot be loaded; every problem found, located."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(problem_lines(problems)))

    def lines(self) -> list[str]:
        return problem_lines(self.problems)
