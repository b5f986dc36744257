"""The archive's record formats as models (their names: lifecycle.formats), checked whenever a
record is read: one that does not parse (another tool, a hand edit, a crafted object) is one
line naming the object, never a KeyError three calls later. The rows a record carries are the
ledger's own dataclasses, checked the same way; unknown keys are ignored (docs/formats.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from lifecycle.durations import instant
from lifecycle.errors import MAX_QUOTED_CHARS, clip
from lifecycle.formats import FORMATS, IMAGE_FORMAT, PIN_FORMAT, RESULT_FORMAT_2, VERSION_FORMAT_1
from lifecycle.ledger.boots import BakedUse, BootRecord, CacheRow, CacheUse
from lifecycle.table import visible

__all__ = ["IMAGE_FORMAT", "PIN_FORMAT", "RESULT_FORMAT_2"]  # what callers still import from here

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


def _zoned(at: str) -> str:
    if instant(at) is None:
        raise ValueError("not a time with its zone (ISO 8601), as lifecycle writes them")
    return at


# When a record was written, as lifecycle writes it (UTC, with its zone): gc, the listings and
# verify order and age records by it, and one that is no time, or of no zone, cannot be.
Stamp = Annotated[str, AfterValidator(_zoned)]
Count = Annotated[int, Field(ge=0, strict=True)]
Flag = Annotated[bool, Field(strict=True)]
Scalar = int | float | str | bool | None

Model = TypeVar("Model", bound=BaseModel)


class _Part(BaseModel):
    # Not strict as a whole: the rows a record carries are the ledger's own dataclasses, which
    # strict mode would take only as instances, never from JSON. Flags and sizes are strict.
    model_config = ConfigDict(extra="ignore", frozen=True)


class BlobEntry(_Part):
    """A blob a record refers to; `md5` (in records of earlier releases) is the ETag a single
    PUT of it got, which lets a listing verify it."""

    sha256: Sha256
    size: Count
    md5: str | None = None


class PlacedBlob(BlobEntry):
    """A blob of a cache version: its own object, or (`pack` given) `size` bytes at `offset`
    of that pack (the pack is verified as a whole)."""

    pack: Sha256 | None = None
    offset: Count | None = None


class PackEntry(_Part):
    """A pack a cache version's blobs live in (lifecycle.archive.packs): its sha256 names it."""

    sha256: Sha256
    size: Count


class FileBlob(_Part):
    """A file kept as a blob: a log, an evidence file, a result's document."""

    sha256: Sha256
    size: Count


class FingerprintBlob(FileBlob):
    """The cache's fingerprint (lifecycle.fingerprint, as JSON) as a blob, and its summary."""

    tree_digest: Sha256
    files: Count
    bytes: Count


class Content(_Part):
    """What `--with-content` archived: every regular file of the cache, each its own blob."""

    files: Count
    bytes: Count


class Withheld(_Part):
    """A cache file left out of the content: a boot wrote a secret's value into it."""

    path: str
    sha256: Sha256
    why: str


class HookRun(_Part):
    """One hook run at one event of a boot."""

    name: str
    event: str
    exit_code: int | None
    duration_s: float | None = None


class CacheBoot(_Part):
    """A boot as a cache's record tells it."""

    boot: BootRecord
    use: CacheUse
    hook_runs: list[HookRun]
    log: FileBlob | None
    evidence: dict[str, FileBlob]  # path under evidence/boots/<boot>/ -> its blob


class ImageSnapshot(_Part):
    """The image a boot ran, as dockerd described it."""

    id: str
    tags: list[str]
    labels: dict[str, str]
    # REGISTRY/REPOSITORY@sha256:… the engine knew it by (pushed or pulled); absent in
    # snapshots taken before they were kept.
    repo_digests: list[str] = Field(default_factory=list)


class PatchEntry(_Part):
    """A patch of the series, by the sha256 of its bytes."""

    file: str
    sha256: Sha256


class ManifestSnapshot(_Part):
    """The resolved manifest a boot ran."""

    digest: str
    file: str
    canonical: dict[str, Any]
    patches: list[PatchEntry]


class PatchBlob(_Part):
    """A patch as a record carries it: its bytes are the blob of its sha256 (size None when the
    writing host kept no copy)."""

    file: str
    sha256: Sha256
    size: int | None


class CacheRecordV1(_Part):
    """`lifecycle-cache-record/1`."""

    format: Literal["lifecycle-cache-record/1"]
    cache_id: str
    host: str
    tool_version: str
    archived_at: Stamp
    with_content: Flag
    cache: CacheRow  # the ledger's row of the cache, less this host's bookkeeping
    fingerprint: FingerprintBlob
    content: Content | None
    withheld: list[Withheld] = Field(default_factory=list)
    boots: list[CacheBoot]
    image: ImageSnapshot | None
    manifest: ManifestSnapshot | None
    patches: list[PatchBlob]
    blobs: list[BlobEntry]

    def boot_ids(self) -> set[str]:
        """The boots the record lists."""
        return {entry.boot.id for entry in self.boots}


class CanonicalResult(_Part):
    """A result as its digest is taken over (lifecycle.results.model.canonical_result)."""

    id: str
    boot_id: str
    name: str
    status: Literal["pass", "fail", "inconclusive"]
    metrics: dict[str, Scalar]
    note: str | None
    source: str
    instrumented: Flag
    document: FileBlob | None
    created_at: Stamp


class ResultBoot(_Part):
    """The boot behind a result."""

    boot: BootRecord
    hook_runs: list[HookRun]
    log: FileBlob | None


class _ResultRecord(_Part):
    """What a result's record holds in every format: the result, kept verbatim, and who
    archived it."""

    result_id: str
    result: dict[str, Any]  # canonical JSON, kept verbatim: its digest is taken over it
    digest: Sha256
    host: str
    tool_version: str
    archived_at: Stamp
    blobs: list[BlobEntry]

    def canonical(self) -> CanonicalResult:
        """The result itself, checked."""
        return CanonicalResult.model_validate(self.result)

    @model_validator(mode="after")
    def _one_result(self) -> _ResultRecord:
        # Its key names it by `result_id` (lifecycle.archive.record.named_by_key), its digest
        # covers `result`: one whose two ids differ would answer for one result with another's.
        if self.result.get("id") != self.result_id:
            found = self.result.get("id")
            raise ValueError(f"result.id {found} is not the record's result_id {self.result_id}")
        return self


class ResultRecordV1(_ResultRecord):
    """`lifecycle-result-record/1`: the result with its boot inlined (the previous release)."""

    format: Literal["lifecycle-result-record/1"]
    boot: ResultBoot
    caches: list[str]
    image: ImageSnapshot | None
    manifest: ManifestSnapshot | None


class KeyFactors(_Part):
    """What decides whether a cache's compiled artefacts are valid, hashed into its key."""

    cache_name: str
    manifest_digest: str  # the resolved manifest and every patch byte
    base_digest: str | None  # the base image's id; None: an image built before it was kept
    vllm: str
    flashinfer: str
    arch: str  # LIFECYCLE_GPU_ARCH of the host that booted it


class MadeBy(_Part):
    """The last boot that used a cache before one of its versions was archived."""

    id: str
    # A version left by a boot that did not end `ok` may hold a half-built .so; `damaged`: its
    # tree was changed behind lifecycle's back after that boot (`id` is `archive` when no boot
    # here used it), so no boot made it.
    outcome: str


class CacheVersion(_Part):
    """`lifecycle-cache-version/2` (or /1, without packs): a cache's state at one point in time."""

    format: Literal["lifecycle-cache-version/2", "lifecycle-cache-version/1"]
    cache_id: str
    tree_digest: Sha256
    parent: Sha256 | None  # the tree this version grew from; None: the first archived
    made_by: MadeBy | None
    host: str
    tool_version: str
    archived_at: Stamp
    with_content: Flag
    cache: CacheRow  # the row of the cache where it was archived, less that host's bookkeeping
    key: KeyFactors | None
    fingerprint: FingerprintBlob
    content: Content | None
    withheld: list[Withheld] = Field(default_factory=list)
    blobs: list[PlacedBlob]
    packs: list[PackEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_tree(self) -> CacheVersion:
        if self.fingerprint.tree_digest != self.tree_digest:
            raise ValueError("fingerprint.tree_digest is not the version's tree_digest")
        sizes = {pack.sha256: pack.size for pack in self.packs}
        if self.format == VERSION_FORMAT_1 and (sizes or any(b.pack for b in self.blobs)):
            raise ValueError(f"a {VERSION_FORMAT_1} record has no packs")
        for blob in self.blobs:
            if (blob.pack is None) != (blob.offset is None):
                raise ValueError(f"blob {blob.sha256}: a pack needs an offset, and only it")
            if blob.pack is not None and blob.offset is not None:
                if blob.pack not in sizes:
                    raise ValueError(f"blob {blob.sha256}: its pack {blob.pack} is not listed")
                if blob.offset + blob.size > sizes[blob.pack]:
                    raise ValueError(f"blob {blob.sha256}: past the end of pack {blob.pack}")
        return self


class BootRecordV1(_Part):
    """`lifecycle-boot-record/1`: one boot, whichever caches it used."""

    format: Literal["lifecycle-boot-record/1"]
    boot_id: str
    boot: BootRecord
    arch: str
    caches: list[CacheRow]  # the row of each cache it used, as this host keeps it
    uses: list[CacheUse]  # each cache: cold or warm, the tree it started from and left
    # The caches baked into its image (lifecycle bake), as the boot used them; none for a
    # boot of an engine image, and in records written before bakes were.
    baked: list[BakedUse] = Field(default_factory=list)
    hook_runs: list[HookRun]
    log: FileBlob | None
    evidence: dict[str, FileBlob]  # path under evidence/boots/<boot>/ -> its blob
    image: ImageSnapshot | None
    manifest: ManifestSnapshot | None
    patches: list[PatchBlob]
    host: str
    tool_version: str
    archived_at: Stamp
    blobs: list[BlobEntry]


class RecordRef(_Part):
    """Another record, by key (under the archive's prefix) and the sha256 of its bytes."""

    key: str
    sha256: Sha256


class VersionRef(_Part):
    """The exact version of one cache a result stands on."""

    cache_id: str
    tree_digest: Sha256 | None  # what the boot left the cache holding
    # Its record; None when the cache changed again before that tree was archived.
    record: RecordRef | None


class ResultRecordV2(_ResultRecord):
    """`lifecycle-result-record/2`: one result, the boot record and the cache versions."""

    format: Literal["lifecycle-result-record/2"]
    boot: RecordRef
    manifest_name: str
    manifest_digest: str
    arch: str
    caches: list[VersionRef]


class ImageRecordV1(_Part):
    """`lifecycle-image-record/1`: an engine image pushed to a registry, found by digest."""

    format: Literal["lifecycle-image-record/1"]
    manifest_digest: str
    image_id: str
    reference: str  # REGISTRY/REPOSITORY@sha256:…: what `boot --pull` pulls
    tag: str  # REGISTRY/REPOSITORY:TAG it was pushed as
    labels: dict[str, str]
    host: str
    tool_version: str
    pushed_at: Stamp
    # A baked image's provenance: an in-toto Statement v1 (lifecycle.bake.provenance), its
    # subject the pushed digest too; None for an engine image.
    provenance: dict[str, Any] | None = None


class PinV1(_Part):
    """`lifecycle-pin/1`: a result kept, with everything behind it, by `gc --remote`."""

    format: Literal["lifecycle-pin/1"]
    target: str  # a result id
    reason: str
    host: str
    pinned_at: Stamp


class GcRecordV1(_Part):
    """`lifecycle-gc-record/1`: what one sweep of `gc --remote` removed, and by which rule."""

    format: Literal["lifecycle-gc-record/1"]
    run_id: str  # g-…, as the host's ledger journals it
    host: str
    tool_version: str
    policy: str  # the options it ran with, as the user gave them
    removed_at: Stamp  # stamped just before its first deletion
    removed: dict[str, list[str]]  # kind (lifecycle.archive.layout) -> keys under the prefix
    rules: dict[str, str]  # kind -> why the policy let objects of that kind go


Record = (
    CacheRecordV1
    | ResultRecordV1
    | CacheVersion
    | BootRecordV1
    | ResultRecordV2
    | ImageRecordV1
    | PinV1
    | GcRecordV1
)

# format -> the model that reads it: each model names its formats in its `format` field.
MODELS: dict[str, type[Record]] = {
    name: model
    for model in get_args(Record)
    for name in get_args(model.model_fields["format"].annotation)
}
assert MODELS.keys() == FORMATS.keys(), "lifecycle.formats lists every model's formats"


def format_name(model: type[BaseModel]) -> str:
    """The format name a record model writes (the first of those it reads)."""
    return next(name for name in FORMATS if MODELS[name] is model)


def format_names(model: type[BaseModel]) -> frozenset[str]:
    """Every format name a record model reads."""
    return frozenset(name for name, known in MODELS.items() if known is model)


def stored_as(kind: str) -> type[Record]:
    """The model of the records under keys of this kind (lifecycle.archive.layout)."""
    return next(MODELS[name] for name, (_, stored) in FORMATS.items() if stored == kind)


class RecordInvalid(ValueError):
    """A record that is not of the format it must be; `problems` name each field."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def parse_as(model: type[Model], document: object) -> Model:
    """Any record from parsed JSON (a result's canonical part checked too); RecordInvalid
    naming what is wrong."""
    record = _parse(model, document)
    result = getattr(record, "result", None)
    if isinstance(result, dict):
        _parse(CanonicalResult, result, "result.")
    return record


def _parse(model: type[Model], document: object, prefix: str = "") -> Model:
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        problems = [_problem(prefix, error["loc"], error["msg"]) for error in exc.errors()[:3]]
        more = exc.error_count() - len(problems)
        raise RecordInvalid(problems + ([f"and {more} more"] if more > 0 else [])) from None


def _problem(prefix: str, loc: tuple[int | str, ...], msg: str) -> str:
    # The path holds the record's own keys and the message may quote its values (a validator's
    # words): whoever wrote the record chose both. Each is shown on the one line, escaped and
    # clipped, so that a key's newline forges no line beneath the error.
    path = ".".join(visible(clip(str(part), MAX_QUOTED_CHARS)) for part in loc) or "(record)"
    return f"{prefix}{path}: {visible(clip(msg))}"
