"""Every verb's arguments and options, declared once.

A request class is a verb: its docstring is the verb's help, its fields are the verb's
arguments (`arg`) and options (`opt`), and `lifecycle.cli` builds the click command from them;
the function named by `run=` (in lifecycle.commands) receives an instance. A field's flag is
its name (`dry_run` is `--dry-run`) unless declared; its Python type says the rest: `bool` is
a flag, `tuple[...]` repeatable, `int`/`float` typed, `Path` a path (`path="file"`/`"dir"`).
Only click is imported here: `lifecycle --help` reads these classes.
"""

from __future__ import annotations

import inspect
import math
import os
import re
from pathlib import Path
from typing import Any, ClassVar, NoReturn, dataclass_transform

import click

from lifecycle.errors import MAX_QUOTED_CHARS, clip
from lifecycle.formats import RECORD_KINDS

REQUIRED: Any = object()  # an argument with no default must be given


class Text(click.types.StringParamType):
    """Text given on the command line, which must be UTF-8: an argument of other bytes (a
    Latin-1 name from an old script) reaches Python as surrogates, which no id, name or URL
    holds and which SQLite, S3 and JSON cannot take (a bug's exit 4 where it met them first).
    A path is not text: a file's name may be any bytes (GivenPath, click.Path)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text: str = super().convert(value, param, ctx)
        try:
            text.encode()
        except UnicodeEncodeError:
            shown = repr(os.fsencode(text))[2:-1]  # the bytes given, as Python writes them
            self.fail(f"'{clip(shown, MAX_QUOTED_CHARS)}' is not UTF-8 text", param, ctx)
        return text


TEXT = Text()  # every text argument and option not typed otherwise


class Given(Text):
    """Text that says something: an empty or blank value is a usage error naming the flag.
    An option left out means "no filter" (every cache, the configured archive), so one given
    with nothing in it must not mean the same: `--older-than ''` from an unset shell variable
    would widen a teardown to every cache. (click's int already refuses a blank value.)"""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = super().convert(value, param, ctx)
        if not text.strip():
            self.fail(f"{text!r} is empty; give a value or leave it out", param, ctx)
        return text


GIVEN = Given()  # every destructive verb's text options


class Registry(Text):
    """A registry to push to, as docker names one: HOST[:PORT][/NAMESPACE…] (`127.0.0.1:5000`,
    `ghcr.io/team`). Refused before anything is built: dockerd refuses the tag only once the
    image is built, and no scheme (`http://`) or upper-case path is a name it takes."""

    SHAPE = re.compile(
        r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
        r"(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*/?"
    )

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = super().convert(value, param, ctx)
        if not self.SHAPE.fullmatch(text):
            shape = "HOST[:PORT][/NAMESPACE], as docker names one"
            self.fail(f"{text!r} is not a registry: {shape}", param, ctx)
        return text


REGISTRY = Registry()


class Seconds(click.FloatRange):
    """A time limit in seconds: above 0 and finite. `nan` compares false with every bound, so
    a FloatRange alone takes it (and `inf`), and a limit of either never ends anything."""

    def __init__(self) -> None:
        super().__init__(min=0, min_open=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a number of seconds above 0", param, ctx)
        return seconds


SECONDS = Seconds()


class GivenPath(click.Path):
    """A path that names something: an empty one (an unset shell variable) is a usage error
    naming the flag. Taken as is it means `.`, which has no name to write a new file by."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "":
            self.fail("'' is empty; give a path", param, ctx)
        return super().convert(value, param, ctx)


class Param:
    """How one field of a request is given on the command line."""

    def __init__(self, decls: tuple[str, ...], default: Any, settings: dict[str, Any]) -> None:
        self.decls = decls  # for an option: its flags; for an argument: ()
        self.default = default
        self.settings = settings  # click's own keywords (help, metavar, type, ...)
        self.name = ""
        self.kind = ""  # the field's annotation, as written

    @property
    def is_argument(self) -> bool:
        return self.settings.get("argument", False) is True


def opt(*decls: str, default: Any = None, **settings: Any) -> Any:
    """An option; a `bool` is a flag that defaults to False, a `tuple` repeatable and ()."""
    return Param(decls, default, settings)


def arg(*, default: Any = REQUIRED, **settings: Any) -> Any:
    """A positional argument; a `tuple` takes any number."""
    return Param((), default, {**settings, "argument": True})


def _field(param: Param, name: str, kind: str) -> Param:
    param.name, param.kind = name, kind
    if param.default is None and kind == "bool":
        param.default = False
    elif param.default is None and kind.startswith("tuple["):
        param.default = ()
    return param


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(opt, arg))
class Request:
    """What the command line asked of a verb. Subclass with `verb=` (default: the class's name,
    lowercased) and `run=` ("module:function" in lifecycle.commands; default: VERB:run)."""

    VERB: ClassVar[str]
    RUN: ClassVar[str]
    PARAMS: ClassVar[dict[str, Param]]
    as_json: bool = opt("--json", help="Print the report as JSON.")

    def __init_subclass__(cls, verb: str = "", run: str = "", json: bool = True) -> None:
        cls.VERB = verb or cls.__name__.lower()
        cls.RUN = run or f"{cls.VERB}:run"
        cls.PARAMS = {}
        for klass in reversed(cls.__mro__[: cls.__mro__.index(Request)]):  # bases' fields first
            for name, kind in inspect.get_annotations(klass).items():
                if not kind.startswith("ClassVar"):
                    cls.PARAMS[name] = _field(klass.__dict__[name], name, kind)
        if json:
            cls.PARAMS["as_json"] = _field(Request.__dict__["as_json"], "as_json", "bool")
        else:
            cls.as_json = False  # the verb prints no report

    def __init__(self, **given: Any) -> None:
        for name, param in self.PARAMS.items():
            value = given.pop(name, param.default)
            if value is REQUIRED:
                raise TypeError(f"{self.VERB}: {name} is required")
            object.__setattr__(self, name, value)
        if given:
            raise TypeError(f"{self.VERB}: no such field {', '.join(given)}")

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"a request is read-only: {name}")

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.PARAMS)
        return f"{type(self).__name__}({fields})"


# Help shared by several verbs.
TO = "Archive location (default: LIFECYCLE_ARCHIVE)."
FROM = "Read the archive alone (no ledger)."
HOOK = "Attach hooks/NAME."
ENGINE = "Where the cells run: this host's Docker engine, or a Ray cluster (default: the plan's)."
ADDRESS = "The Ray cluster's head (default: RAY_ADDRESS, else the cluster this host is part of)."


class Validate(Request):
    """Validate manifests: files, dirs or refs (default: every manifest under the manifests dir)."""

    paths: tuple[Path, ...] = arg(type=GivenPath(path_type=Path))


class Show(Request):
    """Print the resolved manifest of VERSION (or a manifest path) and its digest."""

    version: str = arg()


class Build(Request):
    """Build the engine image of VERSION through the Docker Engine API."""

    version: str = arg()
    dry_run: bool = opt(help="Print the plan (Dockerfile, context, tag, labels).")
    force: bool = opt(help="Build even if an image of this digest exists.")
    push: str | None = opt(
        metavar="REGISTRY", type=REGISTRY, help="Tag and push the image to REGISTRY."
    )


class Boot(Request):
    """Boot the built engine of VERSION with its JIT caches mounted from tracked host dirs."""

    version: str = arg()
    profile: str | None = opt(help="Boot profile (default: the only one, else 'serve').")
    cold: bool = opt(help="Start from empty caches instead of reusing live ones.")
    hook_names: tuple[str, ...] = opt("--hook", metavar="NAME", help=HOOK)
    timeout: float | None = opt(
        type=SECONDS,
        help="Stop the engine after this many seconds.",
    )
    dry_run: bool = opt(help="Print the exact container spec; run nothing.")
    pull: bool = opt(help="Pull the image by digest if this host has none (docs: bucket.md).")
    baked: bool = opt(
        help="Boot this host's newest bake of VERSION and the profile: its caches in its layers."
    )


class Bake(Request):
    """Bake VERSION's proven warm caches into its engine image, one layer per cache: each the
    newest whose archive verifies, whose last boot ended ok and was not partial."""

    version: str = arg()
    profile: str | None = opt(help="The profile it boots (default: the only one, else 'serve').")
    push: str | None = opt(
        metavar="REGISTRY",
        type=REGISTRY,
        help="Push it to REGISTRY; its digest is recorded in the archive.",
    )
    dry_run: bool = opt(help="Show which cache of each name would be baked; build nothing.")
    format: str = opt(
        type=click.Choice(["image", "mcv"]),
        default="image",
        show_default=True,
        help="mcv: also a cache-only image in MCV's layout for each cache it knows (docs: mcv.md).",
    )


class Filtered(Request):
    """--from and the filters every listing takes."""

    STATES: ClassVar[str]  # what --state may say
    source: str | None = opt(
        "--from",
        type=GIVEN,
        metavar="S3_URL",
        help="List what this archive holds, whichever host archived it (no ledger).",
    )
    manifest: str | None = opt(type=GIVEN, metavar="NAME", help="Only of this manifest.")
    arch: str | None = opt(type=GIVEN, metavar="ARCH", help="Only of this GPU arch (e.g. 90a).")
    state: str | None = opt(type=GIVEN, metavar="STATE", help="Only in this state: {states}.")
    older_than: str | None = opt(type=GIVEN, metavar="DURATION", help="Only older (2h, 3d).")
    newer_than: str | None = opt(type=GIVEN, metavar="DURATION", help="Only newer (2h, 3d).")


class Caches(Filtered, run="listing:caches"):
    """List tracked JIT caches: size, files, boots that used them, state, age; with --from,
    every cache an archive holds and its versions."""

    STATES = "live, archived, torn-down, missing; with --from: restorable, evidence"


class Boots(Filtered, run="listing:boots"):
    """List boots: when, which profile, outcome, caches cold/warm, hooks, instrumented; with
    --from, every boot an archive holds."""

    STATES = "running, ok, failed, interrupted, aborted"


class Results(Filtered, run="listing:results"):
    """List results: name, status, boot, metrics, archived; instrumented ones are flagged; with
    --from, every result an archive holds."""

    STATES = "pass, fail, inconclusive"


class Why(Request):
    """Why BOOT was cold or partly warm: what changed against a warm boot."""

    boot_id: str = arg(metavar="BOOT")
    against: str | None = opt(metavar="BOOT", help="The boot to compare with (default: best warm).")


class Teardown(Request):
    """Remove boot caches whose archive verifies in S3 now; kept ones are shown with why."""

    cache_ids: tuple[str, ...] = arg(metavar="[CACHE]...", type=GIVEN)
    archive_first: bool = opt("--archive", help="Archive caches not archived yet.")
    with_content: bool = opt(help="With --archive: archive file content too.")
    dry_run: bool = opt(help="Print the plan; change nothing anywhere.")
    yes: bool = opt(help="Do not ask for confirmation.")
    images: bool = opt(help="Also remove engine images no cache refers to.")
    drop_withheld: bool = opt(
        help="Also remove caches holding files no archive may hold (a secret's value in them)."
    )
    manifest: str | None = opt(
        type=GIVEN, metavar="NAME", help="Only caches (and images) of this manifest."
    )
    older_than: str | None = opt(
        type=GIVEN, metavar="DURATION", help="Only caches older than this (2h, 3d)."
    )
    state: str | None = opt(
        type=click.Choice(["live", "archived"]), help="Only caches in this state."
    )
    to: str | None = opt(
        type=GIVEN, metavar="S3_URL", help="Where --archive writes (s3://BUCKET/PREFIX)."
    )
    hook_names: tuple[str, ...] = opt("--hook", type=GIVEN, metavar="NAME", help=HOOK)


class Gc(Request):
    """Remove from an archive every object no kept record needs; never what is behind a pinned
    result. The plan is shown first; a stopped run is completed by the next."""

    remote: bool = opt(help="Collect in the archive (the only kind there is).")
    source: str | None = opt(
        "--from", type=GIVEN, metavar="S3_URL", help="The archive (default: LIFECYCLE_ARCHIVE)."
    )
    keep_last: int | None = opt(metavar="N", help="Keep each cache's N newest versions (trees).")
    older_than: str | None = opt(
        type=GIVEN, metavar="DURATION", help="Remove only what is older (3d, 2w)."
    )
    grace: str = opt(
        type=GIVEN,
        metavar="DURATION",
        default="1h",
        show_default=True,
        help="Never remove what was written this recently (another host may be archiving).",
    )
    dry_run: bool = opt(help="Print the plan; remove nothing.")
    yes: bool = opt(help="Do not ask for confirmation.")


class Plan(Request, run="converge:plan"):
    """Show what it takes to bring this host's caches and images, and the archive, to the
    policy in lifecycle.yaml: what to archive, to remove (and the rule that says so), to keep
    (and why). Changes nothing."""

    out: Path | None = opt(
        "-o",
        "--out",
        type=GivenPath(dir_okay=False, path_type=Path),
        help="Save the plan, bound to the state it saw, for `apply FILE`.",
    )


class Apply(Request, run="converge:apply"):
    """Carry out the policy's plan (or FILE, refused if the state or the policy moved since it
    was made, or if it would now do more than FILE shows): archive, then remove what is
    archived and verified, then collect the archive."""

    file: Path | None = arg(
        metavar="[FILE]", default=None, type=GivenPath(dir_okay=False, path_type=Path)
    )
    yes: bool = opt(help="Do not ask for confirmation.")


class Status(Request):
    """One screen for the morning: caches per manifest (count, size, warm-ready), what the
    policy would do now, production's state, the last night and its verdicts."""


class Pin(Request, run="pin:pin"):
    """Make CACHE (or every cache behind RESULT) a GC root: teardown keeps it until unpinned.

    A pin is this host's: it keeps the caches still here and is kept in this host's ledger.
    """

    target: str = arg(metavar="CACHE|RESULT")
    reason: str | None = opt(
        help="Why it is kept.", show_default="pinned by hand; for RESULT: result <id>"
    )
    to: str | None = opt(
        metavar="S3_URL", help="Pin a RESULT in this archive too (default: LIFECYCLE_ARCHIVE)."
    )


class Unpin(Request, run="pin:unpin"):
    """Remove CACHE's pins (or the one with --reason); teardown may then remove it.

    For RESULT, only the pins that result put on its caches come off; other pins stay.
    """

    target: str = arg(metavar="CACHE|RESULT", type=GIVEN)
    reason: str | None = opt(type=GIVEN, help="Remove only the pin with this reason.")
    to: str | None = opt(type=GIVEN, metavar="S3_URL", help="Unpin a RESULT in this archive too.")


class Archive(Request):
    """Archive caches' evidence (and files, --with-content) to S3, content-addressed, verified."""

    cache_ids: tuple[str, ...] = arg(metavar="[CACHE]...")
    every: bool = opt("--all", help="Every live cache; re-verify archived ones.")
    with_content: bool = opt(help="Archive the cache's files too (restorable).")
    to: str | None = opt(metavar="S3_URL", help=TO)
    dry_run: bool = opt(help="Show what would be uploaded; write nothing.")


class Restore(Request):
    """Rebuild CACHE's dir from an archived version's files (the newest, or the one of TREE, a
    tree digest), verified, and mark it live; or with --into DIR, in a new dir beside it; or
    with --best, what a boot here would reuse; or with --file PATH --output FILE, one file."""

    target: str | None = arg(metavar="CACHE[@TREE]", default=None)
    source: str | None = opt(
        "--from", metavar="S3_URL", help="Archive location (as for archive --to)."
    )
    best: str | None = opt(
        metavar="MANIFEST",
        help="For each cache of MANIFEST, the newest complete version a boot here would reuse.",
    )
    cache_name: str | None = opt("--cache", metavar="NAME", help="With --best: only this cache.")
    file_path: str | None = opt("--file", metavar="PATH", help="Only this file of the cache...")
    output: Path | None = opt(
        type=GivenPath(dir_okay=False, path_type=Path),
        help="...written to this new file (nothing else is downloaded; the ledger is untouched).",
    )
    into: Path | None = opt(
        type=GivenPath(file_okay=False, path_type=Path),
        help="Rebuild CACHE[@TREE] in this new dir instead, beside the cache (which is untouched).",
    )


class Schema(Request, json=False):
    """Print the manifest JSON Schema (for editors' YAML language servers), or a record's."""

    record_kind: str | None = opt(
        "--record",
        type=click.Choice(sorted(RECORD_KINDS)),
        help="The JSON Schema of an archive record format (or a format's full name) instead.",
    )
    config: bool = opt(help="The JSON Schema of lifecycle.yaml (archive, policy) instead.")


class Port(Request):
    """Port the patch series of OLD to the upstream release NEW, on branch port/NEW.

    Exit 0 when the port is complete, 1 while conflicts are pending, 2 on usage errors.
    """

    old: str | None = arg(default=None)
    new: str | None = arg(default=None)
    dry_run: bool = opt(help="Compute the report; write nothing.")
    keep_going: bool = opt(help="Try every patch; report every conflict.")
    resume: bool = opt("--continue", help="Go on after resolving a conflict.")
    abort: bool = opt(
        help="Forget the stopped port; edits made in its worktree are kept as a patch"
        " (with --dry-run: say what it would do)."
    )
    branch: str | None = opt(metavar="NAME", help="Branch to commit on (default: port/NEW).")
    release: str | None = opt(metavar="VERSION", help="Upstream release (default: from NEW).")
    allow_dirty: bool = opt(help="Port OLD as in the working tree though HEAD differs.")
    force: bool = opt(help="Replace a NEW that exists (keeps what it validated).")


GROUPS = {
    "result": "Record results against boots; `lifecycle results` lists them.",
    "audit": "Which caches, image, manifest and patches stand behind a result; what stands on a"
    " cache.",
}


class ResultAdd(Request, verb="result add", run="result:add"):
    """Record a result against BOOT; archived at once when an archive location is set."""

    boot_id: str = arg(metavar="BOOT")
    name: str = opt(required=True, help="What was tested, e.g. batch-burst-64.")
    status: str = opt(
        required=True, type=click.Choice(["pass", "fail", "inconclusive"]), help="Verdict."
    )
    metrics: tuple[str, ...] = opt(
        "--metric",
        metavar="NAME=VALUE",
        help="A measured value: a JSON number, true, false, null, or text. Repeatable.",
    )
    document: Path | None = opt(
        "--file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="A JSON object kept with the result; its `metrics` and `note` are taken too.",
    )
    note: str | None = opt(help="Free text kept with the result.")
    to: str | None = opt(
        metavar="S3_URL", help="Archive it there now (default: LIFECYCLE_ARCHIVE)."
    )


class AuditResult(Request, verb="audit result", run="audit:result"):
    """The chain: result, boot, caches, image, manifest, patches."""

    result_id: str = arg(metavar="RESULT")
    source: str | None = opt("--from", metavar="S3_URL", help=FROM)
    provenance: Path | None = opt(
        type=click.Path(dir_okay=False, path_type=Path),
        help="Also write the chain as an in-toto Statement v1 to this file.",
    )


class AuditCache(Request, verb="audit cache", run="audit:cache"):
    """Every boot that used CACHE and every result that stands on it."""

    cache_id: str = arg(metavar="CACHE")
    source: str | None = opt("--from", metavar="S3_URL", help=FROM)


class Night(Request):
    """Run the acceptance night PLAN: every cell a recorded boot with its results, production
    down for the night and always brought back, the ladders' values written, the evidence
    archived; resumes where a stopped night left off.

    Exit 0 when every pin passes and every ladder wrote its value, 1 otherwise.
    """

    plan: Path | None = arg(default=None, type=click.Path(dir_okay=False, path_type=Path))
    dry_run: bool = opt(help="Show the cells in order; boot nothing, run no acting hook.")
    rerun: tuple[str, ...] = opt(
        type=GIVEN, metavar="CELL", help="Run this cell again (a pattern: 'demo/0.2:batch:*')."
    )
    new: bool = opt(help="A new night, even if this plan's last one did not finish.")
    recover: bool = opt(help="Bring production back wherever a night left it down.")
    to: str | None = opt(type=GIVEN, metavar="S3_URL", help=TO)
    engine: str | None = opt(type=click.Choice(["local", "ray"]), help=ENGINE)
    address: str | None = opt(type=GIVEN, metavar="HOST:PORT", help=ADDRESS)


class Tune(Request):
    """Climb a LADDER of a tuned engine argument on VERSION: predictions registered first,
    every rung cold and warm at a forced shape, the highest value whose margin clears the floor
    in both written as validated. --revalidate re-measures carried values instead.

    Exit 0 when a value was written, 1 when none clears or a new value is proposed.
    """

    version: str = arg()
    ladder: Path | None = arg(default=None, type=click.Path(dir_okay=False, path_type=Path))
    revalidate: bool = opt(help="Measure each carried value again by its recorded ladder.")
    dry_run: bool = opt(help="Show the rungs; boot nothing.")
    new: bool = opt(help="Start over, even if this ladder's last run did not finish.")
    to: str | None = opt(metavar="S3_URL", help=TO)
    engine: str | None = opt(type=click.Choice(["local", "ray"]), help=ENGINE)
    address: str | None = opt(type=GIVEN, metavar="HOST:PORT", help=ADDRESS)


class Verify(Request):
    """Hash the live cache and the archived objects needed now again; name whatever differs.
    What a gc removed by rule is reported as collected, older versions as history. A baked
    image (its id or tag): each cache layer hashed again, each version record checked. A
    built engine image (its id or tag): still on dockerd, or how it went (the teardown that
    removed it, and when, or behind lifecycle's back).

    Exit 1 when anything needed differs or cannot be read to be compared, 3 when the
    archive cannot be reached.
    """

    target: str = arg(metavar="CACHE[@TREE]|RESULT|IMAGE")
    source: str | None = opt("--from", metavar="S3_URL", help=FROM)
    every: bool = opt(
        "--all-versions", help="Every version and boot record, not only those needed now."
    )


VERBS: tuple[type[Request], ...] = (
    Validate, Show, Build, Boot, Bake, Caches, Boots, Why, Status, Plan, Apply, Teardown, Gc, Pin,
    Unpin, Archive, Restore, Schema, Port, ResultAdd, Results, AuditResult, AuditCache, Night,
    Tune, Verify,
)  # fmt: skip
