"""`lifecycle why BOOT [--against BOOT]`: why a boot was cold or only partly warm.

It compares the boot with the boot it should have matched (the one given, or the newest warm
boot of the same manifest and profile) and names each factor that changed, in the order a
cache is lost: lifecycle's cache key (manifest, base image, pins, GPU arch), the manifest,
vLLM's compile dir and the hashes it folds in, each env var of vLLM's env hash, the rest of
the env, and JIT output written outside the tracked caches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.report import Report, plain
from lifecycle.table import human_bytes
from lifecycle.why import Explanation, explain
from lifecycle.why.facts import BootFacts


@dataclass(frozen=True)
class WhyReport(Report):
    """The boot, the boot it was compared with, what changed and what did not."""

    FORMAT: ClassVar[str] = "lifecycle-why/1"
    explanation: Explanation

    def to_json(self) -> dict[str, Any]:
        found = self.explanation
        return {
            "format": self.FORMAT,
            "boot": _boot(found.now),
            "against": {**_boot(found.then), "chosen": found.chosen},
            "summary": found.summary,
            "changed": plain(found.changes),
            "same": found.same,
        }

    def text(self) -> str:
        """The boot's warmth, the other boot and why it was chosen, then each change."""
        found = self.explanation
        now, then = found.now, found.then
        lines = [
            f"boot {now.boot.id}: {now.warmth}",
            f"  {found.summary}",
            *(f"  {r.name}: {r.mode}, {r.verdict or '-'}" for r in now.recorded),
            f"compared with {then.boot.id}: {then.warmth} ({found.chosen})",
        ]
        if found.changes:
            lines.append("what changed:")
            lines += [f"  {change.line()}" for change in found.changes]
        else:
            lines.append("nothing that decides a cache's reuse changed")
        lines.append("the same: " + ", ".join(found.same))
        if now.untracked and now.untracked.files:
            lines.append(
                f"outside tracked caches: {human_bytes(now.untracked.bytes)} in "
                f"{now.untracked.files} files, lost with the container and rebuilt by every boot:"
            )
            lines += [f"  {d}: {human_bytes(b)} in {n} files" for d, n, b in now.untracked.roots]
        return "\n".join(lines) + "\n"


def _boot(facts: BootFacts) -> dict[str, Any]:
    return {
        "id": facts.boot.id,
        "started_at": facts.boot.started_at,
        "outcome": facts.boot.outcome,
        "verdict": facts.verdict,
        "warmth": facts.warmth,
        "caches": {
            r.name: {"mode": r.mode, "verdict": r.verdict, "files_read": r.read}
            for r in facts.recorded
        },
        "untracked": [{"path": path, "bytes": size} for path, size in facts.writes],
    }


def run(ctx: Context, request: verbs.Why) -> WhyReport:
    """Explain one boot from this host's ledger and evidence."""
    boot_id, against = request.boot_id, request.against
    ctx.recorded(missing=f"no boot {boot_id!r} to explain")
    with ctx.ledger(create=False) as ledger:
        return WhyReport(explain(ledger, boot_id, against))
