"""Production is always brought back: the night's guard around the hours it is down.

`production.up` runs however the night ends (docs/night.md, "Production"). A SIGKILL or a
reboot leaves no time to run anything, so every step is journalled first (`:intent`, then
`:done` or `:failed`): the journal then says production is down, every verb says so, and the
next night or `night --recover` brings it up. Downtime is read from the same journal.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lifecycle.errors import AnswerNo, LifecycleError
from lifecycle.hooks import (
    Hook,
    HookExit,
    HookRunner,
    always,
    run_hook_process,
    select,
    tail,
)
from lifecycle.ledger.nights import NightEvent
from lifecycle.night.journal import NightJournal
from lifecycle.night.plan import Production

TIMEOUT_S = 1800.0  # a production service may take long to stop or start; never forever
TAIL = 600


class ProductionFailed(AnswerNo):
    """A production hook failed: the night does not go on without production down as planned."""


@dataclass(frozen=True)
class ProductionHooks:
    """The plan's production hooks, found under hooks/ with what they declare."""

    down: Hook
    up: Hook
    status: Hook | None


def production_hooks(project: Path, production: Production) -> ProductionHooks:
    """The hooks the plan names; a status hook that may act is refused (it runs in dry runs)."""
    names = [production.down, production.up, *([production.status] if production.status else [])]
    found = {hook.name: hook for hook in select(project / "hooks", names)}
    status = found[production.status] if production.status else None
    if status is not None and status.acts:
        raise LifecycleError(
            f"production.status hook {status.name!r} does not declare `# lifecycle: asks`; a"
            " status hook runs in dry runs, so it must only ask"
        )
    return ProductionHooks(found[production.down], found[production.up], status)


def run_hook(
    hook: Hook, event: str, context: dict[str, str], runner: HookRunner, cwd: Path
) -> HookExit:
    """Run one production hook (`hooks/NAME EVENT`) with the night as JSON on stdin."""
    payload = json.dumps({**context, "event": event})
    return runner([str(hook.path), event], payload, cwd, TIMEOUT_S)


def night_context(journal: NightJournal) -> dict[str, str]:
    """What a production hook is told of the night."""
    night = journal.night
    return {"night_id": night.id, "plan": night.plan_name, "host": night.host}


@contextmanager
def production_down(
    journal: NightJournal,
    hooks: ProductionHooks,
    say: Callable[[str], None],
    runner: HookRunner = run_hook_process,
) -> Iterator[None]:
    """Take production down for the block; bring it up when the block is left, however."""
    cwd = Path(journal.night.project)
    # A second Ctrl-C waits: it must not stop production coming back.
    with always(lambda _outcome, _error: bring_up(journal, hooks.up, say, runner)):
        journal.event("production.down:intent", hooks.down.name)
        say(f"production.down: running hooks/{hooks.down.name}")
        done = run_hook(hooks.down, "production.down", night_context(journal), runner, cwd)
        if done.rc != 0:
            journal.event("production.down:failed", _failure(done))
            raise ProductionFailed(f"production.down hook {hooks.down.name!r} {_failure(done)}")
        journal.event("production.down:done", hooks.down.name)
        yield


def bring_up(
    journal: NightJournal, hook: Hook, say: Callable[[str], None], runner: HookRunner
) -> bool:
    """Run the up hook, journalled; whether production is up. Never raises for a failed hook:
    the journal keeps saying production is down, and every verb repeats it."""
    journal.event("production.up:intent", hook.name)
    say(f"production.up: running hooks/{hook.name}")
    started = time.monotonic()
    cwd = Path(journal.night.project)
    done = run_hook(hook, "production.up", night_context(journal), runner, cwd)
    if done.rc == 0:
        journal.event("production.up:done", hook.name)
        say(f"production.up: done in {time.monotonic() - started:.1f} s")
        return True
    journal.event("production.up:failed", _failure(done))
    say(f"production.up FAILED: hooks/{hook.name} {_failure(done)}; production is still down")
    return False


def status(hook: Hook, context: dict[str, str], runner: HookRunner, cwd: Path) -> str:
    """What the status hook says (it only asks)."""
    done = run_hook(hook, "production.status", context, runner, cwd)
    text = _said(done, bool(done.out.strip()) or not done.err.strip())
    return f"exit {done.rc}: {text}" if done.rc else text or "exit 0"


def is_down(event: NightEvent, running: bool = False) -> str:
    """A night's last production event, as a warning: production is (or may be) down. While a
    night `running` holds this host's night lock, production is down on purpose."""
    if running:
        return (
            f"production is down while night {event.night_id} runs ({event.event} at"
            f" {event.at}); the night brings it back when it ends"
        )
    when = f"since {event.at}" if event.event != "production.up:failed" else f"({event.at})"
    what = {
        "production.down:intent": "may be down: the night stopped while production.down ran",
        "production.down:done": "is down: production.down ran and production.up never did",
        "production.down:failed": "may be down: production.down failed",
        "production.up:intent": "may be down: the night stopped while production.up ran",
        "production.up:failed": "is down: production.up failed",
    }.get(event.event, f"may be down ({event.event})")
    return (
        f"PRODUCTION {what} {when}; night {event.night_id}."
        " Run `lifecycle night --recover` to bring it up"
    )


def _failure(done: HookExit) -> str:
    how = "timed out" if done.rc is None else f"exited {done.rc}"
    said = _said(done, not done.err.strip())
    return f"{how}: {said}" if said else how


def _said(done: HookExit, stdout: bool) -> str:
    """The end of what the hook printed on stdout (or stderr), saying when its beginning is
    missing."""
    text, left_out = (done.out, done.out_left_out) if stdout else (done.err, done.err_left_out)
    return tail(text.strip(), left_out, TAIL)
