"""What every verb is handed by the CLI: where things are, and how to reach the services.

The CLI makes one Context from the command line and the environment; a verb reads settings,
opens the ledger and reaches dockerd and S3 only through it. Tests make their own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifecycle.errors import LifecycleError
from lifecycle.faults import Checkpoint, crash_checkpoint
from lifecycle.home import Home, NoLedger
from lifecycle.ledger import Ledger, has_ledger


@dataclass(frozen=True)
class Context:
    """The environment of one command."""

    environ: Mapping[str, str]
    manifests_dir: Path
    home: Home  # LIFECYCLE_HOME's layout, made once by the CLI; every path under it
    say: Callable[[str], None] = field(default=lambda line: None)  # progress, on stderr
    note: Callable[[str], None] = field(default=lambda line: None)  # a remark, on stderr
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))  # the clock
    out: Callable[[str], None] = field(default=lambda text: None)  # text on stdout
    # Returns when the user agreed, raises when not; None: no terminal to ask on.
    ask: Callable[[str], None] | None = None

    @property
    def project(self) -> Path:
        """The project root: the directory holding `manifests/` (and `hooks/`)."""
        return self.manifests_dir.parent

    @property
    def gpu_arch(self) -> str:
        """LIFECYCLE_GPU_ARCH (e.g. 90a): part of every cache key; `unknown` when unset."""
        return self.environ.get("LIFECYCLE_GPU_ARCH", "unknown")

    def agree(self, question: str, request: Any, plan_json: Callable[[], Any]) -> None:
        """Go on only with the user's agreement: `--yes`, or a yes on the terminal. With no
        terminal, refuse (with --json, the plan is printed first, with no result)."""
        if request.yes:
            return
        if self.ask is None:
            if request.as_json:
                self.out(json.dumps(plan_json(), indent=2) + "\n")
            raise LifecycleError("nothing removed: no terminal to confirm on; pass --yes")
        self.ask(question)

    def checkpoint(self) -> Checkpoint:
        """The test-only fault injection points (a no-op unless the tests set them)."""
        return crash_checkpoint(self.environ)

    def docker(self) -> Any:
        """A docker SDK client, checked with a ping (lifecycle.dockerd)."""
        from lifecycle.dockerd import connect  # the SDK is imported by the verbs that use it

        return connect(self.environ)

    def s3(self) -> Any:
        """A boto3 S3 client whose long waits are told through `say` (lifecycle.archive)."""
        from lifecycle.archive.objects import s3_client

        return s3_client(self.environ, self.say)

    @contextmanager
    def ledger(self, *, create: bool = True, missing: str | None = None) -> Iterator[Ledger]:
        """The ledger. Verbs that only act on what was recorded pass create=False: in a home with
        no ledger they write nothing and fail with `missing`."""
        try:
            ledger = Ledger.open(self.home, create=create)
        except NoLedger as exc:
            raise LifecycleError(f"{missing}: {exc}" if missing else str(exc)) from None
        try:
            yield ledger
        finally:
            ledger.close()

    @contextmanager
    def reading(self) -> Iterator[Ledger]:
        """The ledger, for a verb that only reads it (a plan, a dry run): in a home where
        nothing is recorded yet, an empty one in memory (and a note), so none is made there."""
        if not self.recorded():
            ledger = Ledger.empty(self.home)
            try:
                yield ledger
            finally:
                ledger.close()
            return
        with self.ledger(create=False) as ledger:
            yield ledger

    def recorded(self, missing: str | None = None) -> bool:
        """Whether this home holds a ledger, read without writing anything. With `missing`, its
        absence is that error; without, a note says nothing is recorded here yet."""
        if has_ledger(self.home.root):
            return True
        if missing:
            raise LifecycleError(f"{missing}: {NoLedger(self.home.root)}")
        self.note(f"{NoLedger(self.home.root)}; nothing is recorded on this host")
        return False
