"""The runs a killed driver never heard back from, though their boots recorded their results.

A run's results are recorded where its boot ran, and only then does its summary travel back to
be journalled `done`. A driver killed in between (on a cluster: while the run's task archives
its boot, or its answer is on its way) leaves the run's results in that host's ledger, their
documents naming the night, cell, run and attempt, and only `started` in the journal. Run again,
the run would boot a second time and record a second result for one run; and its first boot,
which the journal does not name, would be out of reach of the night's end, its caches live and
unarchived whatever the plan says.

So before any run, a resumed night asks its engine which of its runs journalled `started` and
never `done` a boot recorded (on a cluster: every node it can reach), and journals each one the
engine answers `done`, with the boot and node that recorded it. That run then counts once and is
not run again, and its boot is in the journal like every other: the end actions archive and
tear it down on its node. Adopting the run, rather than running it again and settling the boot
left over, is the only way the ledger stays true: a result is never changed nor removed, so
there must never be a second one. A run a node recorded that the night cannot reach now (a
node gone from the cluster) is run again; a boot that ended before recording any result leaves
nothing naming the night, and is run again too.
"""

from __future__ import annotations

from collections.abc import Callable

from lifecycle.night.engine import Engine, RunOrder
from lifecycle.night.journal import NightJournal
from lifecycle.night.prepare import Prepared


def adopt(
    engine: Engine, journal: NightJournal, prepared: Prepared, say: Callable[[str], None]
) -> None:
    """Journal `done` each run left unfinished whose boot the engine finds recorded, a line each."""
    if journal.finished:  # its runs are counted and its end taken: a later look changes none
        return
    cells = {cell.id: cell for cell in prepared.cells}  # a warm-up is none: it records nothing
    orders = [
        RunOrder(journal.night.id, cell, run, attempt, prepared.pins[cell.pin], prepared.hooks[cid])
        for cid, run, attempt in journal.unfinished()
        if (cell := cells.get(cid)) is not None
    ]
    adopted: set[tuple[str, int, int]] = set()
    for summary in engine.recorded(orders) if orders else []:
        where = f"boot {summary.boot_id}" + (f" on {summary.node}" if summary.node else "")
        run = (summary.cell, summary.run, summary.attempt)
        if run in adopted:  # two nodes each ran an attempt of it (one lost, then a kill)
            say(f"{summary.cell} run {summary.run}: {where} recorded it as well: not counted")
            continue
        adopted.add(run)
        journal.done(summary)
        say(
            f"{summary.cell} run {summary.run}: {where} recorded its results ({summary.verdict})"
            " before the night was stopped: counted, not run again"
        )
