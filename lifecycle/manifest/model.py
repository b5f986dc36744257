"""The manifest schema: strict pydantic models (unknown keys are errors), the field types the
documents beside it (night plans, ladders) share, and how a tuned value is measured: its
`measure` (the ladder, as data, to run again) and its `validity` (the conditions it holds for;
docs/manifests.md says why a value carries them)."""

from __future__ import annotations

import math
import re
from pathlib import PurePosixPath
from typing import Annotated, Literal

from packaging.version import InvalidVersion, Version
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from lifecycle.manifest.repository import repository_problem

_SLUG = re.compile(r"[a-z0-9][a-z0-9._-]*")


def version_text(value: object) -> object:
    """A version (or a release named by one) as text: YAML reads `0.30` as the float 0.3, so a
    number is refused rather than taken for the wrong release."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(
            f"YAML read this as the number {value!r}; quote the version, e.g. '0.30.0'"
        )
    return value


def matching(pattern: re.Pattern[str], expected: str) -> AfterValidator:
    """A string `pattern` matches whole; else `'<value>' <expected>`. (Whole: `re.match` with a
    `$` takes a trailing newline, and `HF_TOKEN\\n` names no variable.)"""

    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{value!r} {expected}")
        return value

    return AfterValidator(check)


Text = Annotated[str, Field(min_length=1)]
Slug = Annotated[str, matching(_SLUG, "must be lower-case letters, digits, '.', '_' or '-'")]


class Strict(BaseModel):
    """A model of our documents: unknown keys are errors, nothing is coerced, values are frozen."""

    # No .inf or .nan: no measured value is infinite, and a NaN equals nothing, itself included.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


CONDITION = re.compile(
    r"^\s*(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\s*(?P<op>>=|<=|==|!=|>|<)\s*"
    r"(?P<value>-?\d+(?:\.\d+)?)\s*$"
)
CACHE_FILE = re.compile(r"(?P<cache>[a-z0-9][a-z0-9._-]*):(?P<glob>.+)")  # fullmatch
_METRIC = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def _pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regular expression: {exc}") from None
    return value


def _condition(value: str) -> str:
    if not CONDITION.match(value):
        raise ValueError(f"{value!r}: expected `METRIC OP NUMBER`, e.g. 'vllm:x_bytes > 0'")
    return value


def _cache_file(value: str) -> str:
    match = CACHE_FILE.fullmatch(value)
    glob = PurePosixPath(match["glob"]) if match else None
    if glob is None or glob.is_absolute() or ".." in glob.parts:
        raise ValueError(f"{value!r}: expected CACHE:GLOB, the glob inside the cache's dir")
    return value


MetricName = Annotated[str, matching(_METRIC, "is not a metric name")]
CacheState = Literal["cold", "warm"]


class Evidence(Strict):
    """What can be observed of a boot: log lines, the engine's metrics, files in its caches."""

    log: list[Annotated[str, AfterValidator(_pattern)]] = Field(
        default_factory=list, description="Regular expressions, each matched against the log."
    )
    metrics: list[Annotated[str, AfterValidator(_condition)]] = Field(
        default_factory=list, description="`METRIC OP NUMBER`, the metric as the engine prints it."
    )
    files: list[Annotated[str, AfterValidator(_cache_file)]] = Field(
        default_factory=list, description="`CACHE:GLOB`: a file the boot left in a cache."
    )

    def items(self) -> list[tuple[str, str]]:
        """(kind, what) for each piece: ("log", pattern), ("metric", condition), ("file", …)."""
        return [
            *(("log", p) for p in self.log),
            *(("metric", c) for c in self.metrics),
            *(("file", f) for f in self.files),
        ]


class Shape(Strict):
    """A forced shape (one request carrying 64 prompts) and the evidence it was forced."""

    what: Text
    boot_profile: Slug | None = Field(default=None, description="Default: the manifest's.")
    args: list[str] = Field(default_factory=list, description="Added to the engine's arguments.")
    path: Evidence = Field(description="All observed: the shape was forced.")


class LadderMethod(Strict):
    """A ladder of one tuned value, each rung run cold and warm at a forced shape; the value
    is the highest rung whose margin clears the floor in both cache states."""

    # An integer argument's rungs stay integers (max_num_seqs: [128, 256]).
    rungs: Annotated[list[int | float], Field(min_length=1)]
    shape: Shape
    margin: MetricName = Field(description="The metric (MiB) the engine reports at the shape.")
    floor_mib: Annotated[float, Field(ge=0)]
    timeout_s: Annotated[float, Field(gt=0)] = 600.0


class Validity(Strict):
    """The conditions a validated value was measured in; it holds for them, not beyond."""

    measured_at: Text
    night: Text = Field(description="The night (or ladder) whose journal and records hold it.")
    image_id: Text
    manifest_digest: Text = Field(description="Of the manifest measured, before this was written.")
    cache_states: list[CacheState]
    observers: list[Text] = Field(description="Observing hooks attached: none, or it is no value.")
    floor_mib: float
    predicted_mib: float | None = None
    measured_mib: dict[CacheState, float]
    archive: Text | None = Field(default=None, description="Where the night's record is.")


SCHEMA_VERSION = 1

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_COMMIT = re.compile(r"[0-9a-f]{7,64}")
_PORT_KEY = re.compile(r"([0-9]{1,5})(/(tcp|udp|sctp))?")
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = rf"{_IDENTIFIER}(\.{_IDENTIFIER})*"
_ENTRY_POINT_GROUP = re.compile(_DOTTED)
_OBJECT_REFERENCE = re.compile(rf"{_DOTTED}:{_DOTTED}")


def _pep440(value: str) -> str:
    try:
        return str(Version(value))
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a PEP 440 version") from None


def _absolute_posix(value: str) -> str:
    path = PurePosixPath(value)
    if not path.is_absolute() or ".." in path.parts:
        raise ValueError(f"{value!r} must be an absolute path inside the container, without '..'")
    return str(path)


def _finite(value: object) -> object:
    # Said here, before the union's four members each say why they refuse it.
    if isinstance(value, float) and not math.isfinite(value):
        spelled = ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")
        raise ValueError(f"must be a finite number, not {spelled}")
    return value


def _port_number_as_text(value: object) -> object:
    # YAML reads the key `8000:` as an integer; Docker takes "8000" and "8000/tcp" alike.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _port_key(value: str) -> str:
    match = _PORT_KEY.fullmatch(value)
    if match is None or not 1 <= int(match[1]) <= 65535:
        raise ValueError(f"{value!r} is not a container port: PORT or PORT/tcp|udp|sctp, 1-65535")
    return value


PinnedVersion = Annotated[str, BeforeValidator(version_text), AfterValidator(_pep440)]
EnvName = Annotated[str, matching(_ENV_NAME, "is not an environment variable name")]
ContainerPath = Annotated[str, AfterValidator(_absolute_posix)]
CommitId = Annotated[str, matching(_COMMIT, "is not a commit id (7 to 64 lower-case hex digits)")]
PortKey = Annotated[str, BeforeValidator(_port_number_as_text), AfterValidator(_port_key)]
PinName = Literal["vllm", "flashinfer", "base_image"]


def _repository(value: str) -> str:
    problem = repository_problem(value)
    if problem:
        raise ValueError(problem)
    return value


Repository = Annotated[str, Field(min_length=1), AfterValidator(_repository)]


def _unset(value: object) -> bool:
    # Keys added after manifests were first digested are dumped only when set (`exclude_if`),
    # so a manifest that does not use one dumps, and digests (image tag included), as before
    # it existed.
    return not value


class EnginePins(Strict):
    """What the engine image is made of."""

    vllm: PinnedVersion
    flashinfer: PinnedVersion
    base_image: Text
    package_dir: ContainerPath = Field(
        description="Where the engine's python package lives in the image; patches apply here."
    )
    vllm_dist: Text = Field(default="vllm", description="Distribution name the vllm pin checks.")
    flashinfer_dist: Text = Field(
        default="flashinfer-python", description="Distribution name the flashinfer pin checks."
    )
    unconfirmed: dict[PinName, Text] = Field(
        default_factory=dict,
        exclude_if=_unset,
        description=(
            "Pins nobody has confirmed yet, pin name -> why (`lifecycle port` writes one when "
            "it cannot read a pin from the new release). `validate` warns and `build` refuses "
            "while a pin is listed here: check the pin, correct it if needed, then delete its "
            "entry."
        ),
    )


class Upstream(Strict):
    """Where the engine's source comes from, for `port`."""

    repository: Repository = Field(
        description=(
            "A git URL (https, http, ssh, git, file), an scp-like host:path, or a local path "
            "(relative to the manifest); never beginning with '-'. Put no credentials in it: "
            "git's credential helpers authenticate a private upstream."
        )
    )
    tag: Text = Field(default="v{version}", description="Tag of a release; {version} is replaced.")

    def tag_for(self, version: str) -> str:
        """The upstream tag of `version`."""
        return self.tag.replace("{version}", version)


class Patch(Strict):
    """One patch of the ordered series, with why it is carried."""

    file: Text = Field(description="Path relative to the manifest's directory.")
    reason: Text
    upstream_pr: Text | None = None
    upstream_commit: CommitId | None = None
    drop_when: Text | None = None


def engine_flag(name: str) -> str:
    """The engine's flag for a tuned value: gpu_memory_utilization -> --gpu-memory-utilization."""
    return "--" + name.replace("_", "-")


class TunedValue(Strict):
    """An engine argument whose value was measured, and how."""

    value: Annotated[bool | int | float | str, BeforeValidator(_finite)]
    status: Literal["validated", "carried"]
    measured_on: Text = Field(description="The build the value was measured on.")
    method: Text
    margin: Text | None = None
    carried_from: Text | None = None
    note: Text | None = None
    measure: LadderMethod | None = Field(
        default=None,
        exclude_if=_unset,
        description="How to measure it again (`lifecycle tune --revalidate`).",
    )
    validity: Validity | None = Field(
        default=None,
        exclude_if=_unset,
        description="The conditions it was measured in (`lifecycle tune`).",
    )

    @model_validator(mode="after")
    def _carried_says_from_where(self) -> TunedValue:
        if self.status == "carried" and self.carried_from is None:
            raise ValueError("status 'carried' needs carried_from (the release it was measured on)")
        if self.status == "validated" and self.carried_from is not None:
            raise ValueError("carried_from is only for status 'carried'")
        return self

    def engine_args(self, name: str) -> list[str]:
        """The value as the engine takes it: `--flag VALUE`; `--flag` alone for true, nothing
        for false."""
        if self.value is True:
            return [engine_flag(name)]
        if self.value is False:
            return []
        return [engine_flag(name), str(self.value)]


class JitCache(Strict):
    """A directory the engine JIT-compiles into at boot; mounted from a tracked host dir."""

    path: ContainerPath
    env: EnvName = Field(description="The env var that points the engine at `path`.")
    enabled: bool = True
    settings: dict[EnvName, str] = Field(
        default_factory=dict,
        exclude_if=_unset,
        description=(
            "Env vars a boot sets with this cache so the JIT writes all of its output into "
            "`path` (e.g. Inductor's precompiled headers, which otherwise go to /tmp)."
        ),
    )


class Acceptance(Strict):
    """A command run on the host after the boot; its exit code and JSON stdout become a result.

    It runs from the project root (the directory holding `manifests/`) with the boot as JSON
    on stdin. Exit 0 is pass, 1 fail, any other (or a timeout) inconclusive; its stdout, if
    any, is one JSON object whose `metrics` and `note` the result takes (lifecycle.results).
    """

    command: Annotated[list[Text], Field(min_length=1)]
    name: Slug = Field(default="acceptance", description="The name of the result it records.")
    timeout_s: Annotated[float, Field(gt=0)] = 600.0


class BootProfile(Strict):
    """How to start the engine (or another program in its image): command, environment,
    secrets by name, devices."""

    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    # A yes/no about what the command is, rather than a list of the tuned values a profile
    # takes: the tuned values are the engine's arguments, so the one thing to know is whether
    # the engine runs. True by default, as every profile was the engine before the key.
    engine: bool = Field(
        default=True,
        exclude_if=lambda engine: engine is True,
        description=(
            "Whether the command runs the engine. A boot appends the tuned values to an engine "
            "profile's command, whose args may then not set one of them too; false for another "
            "program in the image (a benchmark client, a shell, a smoke test), which gets none."
        ),
    )
    env: dict[EnvName, str] = Field(default_factory=dict)
    secrets: list[EnvName] = Field(
        default_factory=list,
        description="Names of host env vars passed through; values are never stored.",
    )
    from_host: list[EnvName] = Field(
        default_factory=list,
        exclude_if=_unset,
        description=(
            "Names of host env vars passed through whose values are not secret and are "
            "recorded with the boot (a pod IP, a side channel's host): `why` can then name "
            "one that changed a cache key. Secrets go under `secrets`."
        ),
    )
    gpus: Literal["all"] | Annotated[int, Field(ge=0)] | None = None
    shm_size: Annotated[str, Field(pattern=r"^[0-9]+[bkmg]?$")] | None = None
    ipc: Literal["host", "private", "shareable"] | None = None
    ports: dict[PortKey, Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=dict, description="Container port (8000/tcp) -> host port."
    )
    network: Text | None = Field(
        default=None, description="Docker network mode (e.g. none, host); default: dockerd's."
    )
    acceptance: Acceptance | None = Field(
        default=None,
        exclude_if=_unset,
        description="Run after each boot of this profile; its outcome is a result.",
    )


EntryPointGroup = Annotated[
    str, matching(_ENTRY_POINT_GROUP, "is not an entry point group (e.g. vllm.general_plugins)")
]
ObjectReference = Annotated[
    str, matching(_OBJECT_REFERENCE, "is not an object reference 'package.module:function'")
]


class Manifest(Strict):
    """One pinned engine release, resolved (after `extends` and cache defaults)."""

    schema_version: Literal[1]
    name: Slug
    extends: Text | None = None
    registry: Text | None = Field(
        default=None,
        description=(
            "Where the engine's images are pushed and pulled (HOST[:PORT][/PATH]): `boot` pulls"
            " the image by digest from here when this host has none. Not part of the digest:"
            " where an image is kept is not what it is."
        ),
    )
    engine: EnginePins
    upstream: Upstream
    patches: list[Patch] = Field(default_factory=list)
    tuned: dict[str, TunedValue] = Field(default_factory=dict)
    caches: dict[Slug, JitCache] = Field(default_factory=dict)
    profiles: dict[Slug, BootProfile] = Field(default_factory=dict)
    entry_points: dict[EntryPointGroup, dict[Slug, ObjectReference]] = Field(
        default_factory=dict,
        exclude_if=_unset,
        description=(
            "Entry points the image registers, group -> name -> 'module:function', e.g. "
            "vllm.general_plugins: the engine loads them at start (a module a patch adds is "
            "otherwise never imported). Written as a distribution of their own next to "
            "engine.package_dir."
        ),
    )

    def active_caches(self) -> dict[str, JitCache]:
        """The caches a boot mounts."""
        return {name: cache for name, cache in self.caches.items() if cache.enabled}

    def tuned_args(self, profile_name: str) -> list[str]:
        """The tuned values as engine arguments, for a profile that runs the engine; none for
        one that runs another program."""
        if not self.profiles[profile_name].engine:
            return []
        return [arg for name, tuned in self.tuned.items() for arg in tuned.engine_args(name)]

    def boot_command(self, profile_name: str) -> list[str]:
        """What a boot of the profile runs: its command and args, then its tuned arguments."""
        profile = self.profiles[profile_name]
        return [*profile.command, *profile.args, *self.tuned_args(profile_name)]
