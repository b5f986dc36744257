"""The port report: `--json` prints it, `port-report.json` on the branch records it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from lifecycle import __version__
from lifecycle.port.outcome import PatchResult
from lifecycle.port.upstream import PinChange, Release

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
