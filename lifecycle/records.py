"""The archive's record formats, versioned by name, checked whenever one is read.

Two kinds of record live in S3 beside the content-addressed blobs (lifecycle.archive.store):

- `lifecycle-cache-record/1` at `caches/<cache id>.json`: one cache, its fingerprint, every
  boot that used it with its log and evidence, what was built and booted;
- `lifecycle-result-record/1` at `results/<result id>.json`: one result and the boot behind it.

The rows a record carries (a cache's, a boot's, a boot's use of a cache) are the ledger's own
dataclasses, checked the same way. Every record is one JSON object, keys sorted, written last
as the commit marker of its
archive. `lifecycle schema --record cache|result` prints each format as JSON Schema. A record
read back is checked against its model here, so a record that does not parse (another tool, a
hand edit, a crafted object) is one line naming the object, never a KeyError three calls
later. Unknown keys are ignored, so a newer writer's additions do not break an older reader;
a change a reader must understand gets a new format name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from lifecycle.ledger.boots import BootRecord, CacheRow, CacheUse

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Count = Annotated[int, Field(ge=0, strict=True)]
Flag = Annotated[bool, Field(strict=True)]
Scalar = int | float | str | bool | None

Model = TypeVar("Model", bound=BaseModel)

CACHE_FORMAT = "lifecycle-cache-record/1"
RESULT_FORMAT = "lifecycle-result-record/1"


class _Part(BaseModel):
    # Not strict as a whole: the rows a record carries are the ledger's own dataclasses, which
    # strict mode would take only as instances, never from JSON. Flags and sizes are strict.
    model_config = ConfigDict(extra="ignore", frozen=True)


class BlobEntry(_Part):
    """A blob a record refers to; `md5` is the ETag a single PUT of it gets."""

    sha256: Sha256
    size: Count
    md5: str | None = None


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
    archived_at: str
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
    created_at: str


class ResultBoot(_Part):
    """The boot behind a result."""

    boot: BootRecord
    hook_runs: list[HookRun]
    log: FileBlob | None


class ResultRecordV1(_Part):
    """`lifecycle-result-record/1`."""

    format: Literal["lifecycle-result-record/1"]
    result_id: str
    result: dict[str, Any]  # canonical JSON, kept verbatim: its digest is taken over it
    digest: Sha256
    boot: ResultBoot
    caches: list[str]
    image: ImageSnapshot | None
    manifest: ManifestSnapshot | None
    host: str
    tool_version: str
    archived_at: str
    blobs: list[BlobEntry]

    def canonical(self) -> CanonicalResult:
        """The result itself, checked."""
        return CanonicalResult.model_validate(self.result)


# `lifecycle schema --record KIND` -> (format name, model)
FORMATS: dict[str, tuple[str, type[CacheRecordV1] | type[ResultRecordV1]]] = {
    "cache": (CACHE_FORMAT, CacheRecordV1),
    "result": (RESULT_FORMAT, ResultRecordV1),
}


class RecordInvalid(ValueError):
    """A record that is not of the format it must be; `problems` name each field."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def parse_cache_record(document: object) -> CacheRecordV1:
    """A cache record from parsed JSON; RecordInvalid naming what is wrong."""
    return _parse(CacheRecordV1, document)


def parse_result_record(document: object) -> ResultRecordV1:
    """A result record from parsed JSON; RecordInvalid naming what is wrong."""
    record = _parse(ResultRecordV1, document)
    _parse(CanonicalResult, record.result, "result.")
    return record


def _parse(model: type[Model], document: object, prefix: str = "") -> Model:
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        problems = [
            f"{prefix}{'.'.join(str(p) for p in error['loc']) or '(record)'}: {error['msg']}"
            for error in exc.errors()[:3]
        ]
        more = exc.error_count() - len(problems)
        raise RecordInvalid(problems + ([f"and {more} more"] if more > 0 else [])) from None


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (2020-12) of one record format."""
    name, model = FORMATS[kind]
    schema = model.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": name, **schema}
