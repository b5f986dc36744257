"""What happened to each patch of a port, and the evidence for it, in a form scripts can read;
and the port report (`--json` prints it, `port-report.json` on the branch records it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from lifecycle import __version__
from lifecycle.port.upstream import PinChange, Release


class PatchOutcome(StrEnum):
    """One patch's fate on the new release."""

    CLEAN = "CLEAN"  # same hunks; at most their line numbers moved
    CLEAN_3WAY = "CLEAN_3WAY"  # applied by the 3-way merge; the hunks' context changed
    RENAMED = "RENAMED"  # applied to files upstream renamed
    DROPPED_UPSTREAM = "DROPPED_UPSTREAM"  # the new release already has the change
    EMPTIED = "EMPTIED"  # the change is already there, but nothing proves it upstream's
    CONFLICT = "CONFLICT"  # the merge stopped; a person decides
    RESOLVED = "RESOLVED"  # stopped on a conflict that a person resolved (--continue)
    BLOCKED_BY = "BLOCKED_BY"  # fails alone, applies once an earlier conflicting one is in
    PENDING = "PENDING"  # not tried: the port stopped at an earlier conflict

    @property
    def kept(self) -> bool:
        """Whether the patch is in the new series."""
        return self in _KEPT

    @property
    def needs_person(self) -> bool:
        """Whether the port cannot finish until someone acts on this patch."""
        return self in _OPEN


_KEPT = {PatchOutcome.CLEAN, PatchOutcome.CLEAN_3WAY, PatchOutcome.RENAMED, PatchOutcome.RESOLVED}
_OPEN = {PatchOutcome.CONFLICT, PatchOutcome.BLOCKED_BY, PatchOutcome.PENDING}


class DropMethod(StrEnum):
    """How the port knows a dropped patch's change is upstream."""

    ANCESTOR = "ancestor"  # the recorded upstream_commit is in the new tag, replay came out empty
    PATCH_ID = "patch-id"  # an upstream commit between the tags has the same patch-id
    REVERSE_APPLY = "reverse-apply"  # the patch reverse-applies, fuzz 0, to the new tag


class ConflictKind(StrEnum):
    """Why git's 3-way merge stopped, per file; declared in the order a conflict whose files
    differ is named by: the kind least likely to be a mechanical fix first."""

    BINARY = "binary"
    MODIFY_DELETE = "modify/delete"
    RENAME = "rename"  # rename/rename, rename/delete, or a file moved out of the package dir
    FILE_DIRECTORY = "file/directory"
    ADD_ADD = "add/add"
    CONTENT = "content"


@dataclass(frozen=True)
class ConflictedFile:
    """One file the merge could not settle, by its path in the package dir."""

    path: str
    kind: ConflictKind  # what each side did to the file: content, modify/delete, rename...


@dataclass(frozen=True)
class Conflict:
    """Where a patch stopped, and what upstream did there (a hint, never a reason to drop)."""

    files: tuple[ConflictedFile, ...]
    hint: str | None = None

    @property
    def kind(self) -> ConflictKind:
        """The conflict's name: the most telling kind among its files."""
        kinds = {f.kind for f in self.files}
        return next((k for k in ConflictKind if k in kinds), ConflictKind.CONTENT)

    def to_json(self) -> dict[str, Any]:
        """Plain data for reports and state."""
        return {
            "kind": self.kind.value,
            "files": [{"path": f.path, "kind": f.kind.value} for f in self.files],
            "hint": self.hint,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Conflict:
        """Inverse of to_json."""
        files = tuple(ConflictedFile(f["path"], ConflictKind(f["kind"])) for f in data["files"])
        return cls(files, data.get("hint"))


@dataclass(frozen=True)
class Drop:
    """The evidence a patch's change is upstream."""

    method: DropMethod
    commit: str  # upstream's commit with the change (reverse-apply: the last to touch its files)
    subject: str


@dataclass(frozen=True)
class RelatedCommit:
    """An upstream commit that likely explains a patch, without proving it (a hint)."""

    commit: str
    subject: str
    how: str  # e.g. "wrote the lines the patch adds"


@dataclass(frozen=True)
class Rename:
    """A file the patch touches that upstream moved, paths in the package dir."""

    old: str
    new: str


@dataclass(frozen=True)
class PatchResult:
    """One patch of the old series: what happened, and why."""

    index: int  # position in the old series, from 0
    file: str
    outcome: PatchOutcome
    drop: Drop | None = None
    conflict: Conflict | None = None
    renames: tuple[Rename, ...] = ()
    blocked_by: str | None = None
    unchanged: bool = False  # the exported bytes are the old file's bytes
    note: str | None = None
    related: RelatedCommit | None = None  # EMPTIED: the upstream commit that likely did it

    def detail(self) -> str:
        """The evidence in one line, e.g. `patch-id 1a2b3c4d5e6f "Fix the mix"`."""
        if self.drop:
            return f"{self.drop.method.value} {self.drop.commit[:12]} {self.drop.subject!r}"
        if self.blocked_by:
            return f"needs {self.blocked_by}"
        if self.conflict:
            kind = self.conflict.kind
            files = ", ".join(
                f.path if f.kind is kind else f"{f.path} ({f.kind.value})"
                for f in self.conflict.files
            )
            return f"{kind.value}: {files}"
        if self.renames:
            return ", ".join(f"{r.old} -> {r.new}" for r in self.renames)
        if self.related:
            return (
                f"likely {self.related.commit[:12]} {self.related.subject!r} ({self.related.how})"
            )
        return "byte-identical" if self.unchanged else ""

    def to_json(self) -> dict[str, Any]:
        """Plain data for `--json` and port-report.json."""
        data: dict[str, Any] = {
            "file": self.file,
            "outcome": self.outcome.value,
            "detail": self.detail(),
            "unchanged": self.unchanged,
        }
        if self.drop:
            data["dropped"] = asdict(self.drop)
            data["applied_upstream"] = self.drop.commit  # DEP-3's name for it
        if self.conflict:
            data["conflict"] = self.conflict.to_json()
        if self.renames:
            data["renamed"] = [asdict(r) for r in self.renames]
        if self.blocked_by:
            data["blocked_by"] = self.blocked_by
        if self.note:
            data["note"] = self.note
        if self.related:
            data["related_upstream"] = asdict(self.related)
        return data


REPORT_SCHEMA = 1


@dataclass(frozen=True)
class TunedFate:
    """What the new manifest says of one tuned value: carried from the release it was
    measured on, or kept `validated` because the NEW being replaced had measured it."""

    status: str  # "carried" or "validated"
    origin: str  # carried: the release it was measured on; validated: the NEW it was kept from

    def to_json(self) -> dict[str, str]:
        """Plain data for the report."""
        key = "carried_from" if self.status == "carried" else "kept_from"
        return {"status": self.status, key: self.origin}


class PortStatus(StrEnum):
    """Where the port ended."""

    COMPLETE = "complete"
    CONFLICTS_PENDING = "conflicts-pending"


@dataclass(frozen=True)
class PortReport:
    """What a port did to each patch, pin and tuned value, and where it left things."""

    old_ref: str
    new_ref: str
    old: Release
    new: Release
    upstream: str
    subdir: str
    results: tuple[PatchResult, ...]
    pins: tuple[PinChange, ...]
    tuned: dict[str, TunedFate]
    status: PortStatus
    old_digest: str = ""  # OLD's manifest digest, as ported
    uncommitted: tuple[str, ...] = ()  # OLD's files ported from the working tree, not HEAD
    dry_run: bool = False
    branch: str | None = None
    commit: str | None = None
    worktree: str | None = None
    files: tuple[str, ...] = ()
    digest: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """0 when the port is complete, 1 while conflicts are pending."""
        return 0 if self.status is PortStatus.COMPLETE else 1

    def record(self) -> dict[str, Any]:
        """The deterministic part, committed as port-report.json: no paths of this machine, no
        times, no ids of commits made on it."""
        return {
            "schema": REPORT_SCHEMA,
            "tool": f"lifecycle {__version__}",
            "from": {
                "manifest": self.old_ref,
                **_release(self.old),
                "digest": self.old_digest,
                "uncommitted": list(self.uncommitted),
            },
            "to": {"manifest": self.new_ref, **_release(self.new)},
            "upstream": self.upstream,
            "package_subdir": self.subdir,
            "status": self.status.value,
            "patches": [r.to_json() for r in self.results],
            "pins": [{k: v for k, v in asdict(p).items() if k != "reason"} for p in self.pins],
            "tuned": {name: fate.to_json() for name, fate in self.tuned.items()},
            "digest": self.digest,
        }

    def to_json(self) -> dict[str, Any]:
        """Everything, for `--json`: the record plus where this run left things."""
        return {
            **self.record(),
            "dry_run": self.dry_run,
            "branch": self.branch,
            "commit": self.commit,
            "worktree": self.worktree,
            "files": list(self.files),
            "warnings": list(self.warnings),
            "exit_code": self.exit_code,
        }


def _release(release: Release) -> dict[str, str]:
    return {"version": release.version, "tag": release.tag, "commit": release.commit}
