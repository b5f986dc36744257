"""The other forms of an audit chain: text for `audit result` and `audit cache`, and the result's
chain as an unsigned in-toto Statement v1 (`--provenance`) for attestation tooling; the JSON
forms are the chain itself. The Statement's bytes are stable for a given chain."""

from __future__ import annotations

from typing import Any

from lifecycle.audit.chain import CacheAudit, Chain, Json
from lifecycle.results.model import metrics_text
from lifecycle.table import lines_text

INSTRUMENTED = (
    "INSTRUMENTED: the boot ran with an observing hook, which can change the batch it observes;"
    " read this as a result of the engine plus the hook"
)


def chain_text(chain: Chain, source: str) -> str:
    """result -> boot -> caches -> image -> manifest -> patches, one step per paragraph."""
    result, boot = chain["result"], chain["boot"]
    lines = [f"# audit of result {result['id']}, from {source}"]
    lines.append(f"result {result['id']} {result['name']!r}: {result['status']}")
    if result["instrumented"]:
        lines.append(f"  {INSTRUMENTED}")
    lines.append(
        f"  digest sha256:{result['digest']}  ({result['source']}, {result['created_at']})"
    )
    if result["metrics"]:
        lines.append(f"  metrics: {metrics_text(result['metrics'], None)}")
    if result["note"]:
        lines.append(f"  note: {result['note']}")
    if result["document"]:
        lines.append(f"  document sha256:{result['document']['sha256']}")
    lines.append(
        f"<- boot {boot['id']} on {boot['host']}, {boot['started_at']} .. {boot['ended_at']},"
        f" profile {boot['profile']}: {boot['outcome']} (exit {boot['exit_code']})"
    )
    lines.append("  hooks: " + (hooks_text(boot["hooks"]) or "none"))
    if boot["log"]:
        lines.append(f"  log sha256:{boot['log']['sha256']}")
    for cache in chain["caches"]:
        lines.append(f"<- cache {cache['id']} ({cache['name']}): {cache['mode']}")
        lines.append(f"  tree digest {cache['tree_digest']}")
        if cache["mode"] == "warm" and cache["tree_digest_before"] != cache["tree_digest"]:
            lines.append(f"  (started from {cache['tree_digest_before']})")
        archive = cache["archive"]
        where = (
            f"{archive['record']} (sha256:{archive['record_sha256'][:16]}…)" if archive else None
        )
        lines.append(f"  archive: {where or 'not archived'}")
        if archive and archive["parent"]:
            lines.append(f"  (that version grew from {archive['parent']})")
    image = chain["image"]
    lines.append(f"<- image {image['id']} {' '.join(image['tags'] or [])}".rstrip())
    lines += [f"  registry {reference}" for reference in image["repo_digests"]]
    for key, value in sorted((image["labels"] or {}).items()):
        lines.append(f"  label {key}={value}")
    if statement := image.get("provenance"):
        predicate = statement["predicate"]
        subjects = ", ".join(s["name"] for s in statement["subject"])
        lines.append(
            f"  provenance: {statement['_type']} ({statement['predicateType']}) of {subjects}:"
            f" {len(predicate['buildDefinition']['resolvedDependencies'])} dependencies,"
            f" {len(predicate['runDetails']['byproducts'])} boots measured"
        )
    lines.extend(_manifest_lines(chain["manifest"]))
    for patch in chain["patches"] or []:
        lines.append(f"<- patch {patch['file']} sha256:{patch['sha256']}")
    lines += [f"WARNING {warning}" for warning in chain["warnings"]]
    return lines_text(lines)


def cache_text(audit: CacheAudit, source: str) -> str:
    """The cache, then every boot that used it, then every result standing on it."""
    cache = audit["cache"]
    state = f", {cache['state']}" if cache["state"] else ""
    lines = [
        f"# audit of cache {cache['id']}, from {source}",
        f"cache {cache['id']} ({cache['cache_name']}) of {cache['manifest_name']}{state}",
        f"  manifest sha256:{cache['manifest_digest']}  image {cache['image_id']}",
        f"  tree digest {cache['tree_digest']}",
    ]
    archive = audit["archive"]
    lines.append(f"  archive: {archive['record'] if archive else 'not archived'}")
    lines.append(f"versions ({len(audit['versions'])}):")
    lines += [
        f"  {v['tree_digest'] or '(previous format)'}"
        + (f" from {v['parent'][:12]}" if v["parent"] else "")
        + (" with content" if v["with_content"] else " evidence only")
        + f": {v['record']}"
        for v in audit["versions"]
    ]
    lines.append(f"boots ({len(audit['boots'])}):")
    lines += [
        f"  {b['id']} {b['mode']} {b['started_at']} on {b['host']}, {b['profile']}:"
        f" {b['outcome']}{_flag(b['instrumented'])}"
        for b in audit["boots"]
    ]
    lines.append(f"results ({len(audit['results'])}):")
    lines += [
        f"  {r['id']} {r['name']!r}: {r['status']} (boot {r['boot_id']}){_flag(r['instrumented'])}"
        for r in audit["results"]
    ]
    return lines_text(lines)


def _flag(instrumented: bool) -> str:
    return " INSTRUMENTED" if instrumented else ""


def hooks_text(hooks: list[Json]) -> str:
    """`memory-snapshot (observing), log-event`."""
    return ", ".join(h["name"] + (" (observing)" if h["observing"] else "") for h in hooks)


def _manifest_lines(manifest: Json) -> list[str]:
    lines = [f"<- manifest {manifest['name']} sha256:{manifest['digest']}"]
    if manifest["file"]:
        lines.append(f"  file {manifest['file']}")
    pins = manifest["pins"] or {}
    if pins:
        lines.append("  pins: " + ", ".join(f"{k} {v}" for k, v in pins.items()))
    for name, tuned in (manifest["tuned"] or {}).items():
        origin = f" from {tuned['carried_from']}" if tuned.get("carried_from") else ""
        flag = (
            "  <- NOT re-validated on this release" if name in manifest["not_revalidated"] else ""
        )
        lines.append(f"  tuned {name}={tuned['value']} ({tuned['status']}{origin}){flag}")
    return lines


STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:lifecycle:provenance:v1"


def statement(chain: Chain) -> dict[str, Any]:
    """The in-toto Statement v1 of a chain built by lifecycle.audit.chain.build_chain."""
    result = chain["result"]
    boot = chain["boot"]
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {
                "name": f"result/{result['id']}",
                "digest": {"sha256": result["digest"]},
                "annotations": {
                    "name": result["name"],
                    "status": result["status"],
                    "instrumented": result["instrumented"],
                },
            }
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "result": {k: v for k, v in result.items() if k != "digest"},
            "boot": {
                "id": boot["id"],
                "host": boot["host"],
                "startedOn": boot["started_at"],
                "finishedOn": boot["ended_at"],
                "profile": boot["profile"],
                "outcome": boot["outcome"],
                "exitCode": boot["exit_code"],
                "hooks": boot["hooks"],
                "instrumented": boot["instrumented"],
                "log": _digest(boot["log"]["sha256"]) if boot["log"] else None,
            },
            "caches": [_cache(cache) for cache in chain["caches"]],
            "image": _image(chain["image"]),
            "manifest": _manifest(chain["manifest"]),
            "patches": [
                {"name": p["file"], **_digest(p["sha256"])} for p in chain["patches"] or []
            ],
        },
    }


def _digest(sha256: str) -> dict[str, Any]:
    return {"digest": {"sha256": sha256}}


def _cache(cache: Json) -> dict[str, Any]:
    archive = cache["archive"]
    return {
        "id": cache["id"],
        "name": cache["name"],
        "mode": cache["mode"],
        "treeDigest": cache["tree_digest"],
        "treeDigestBefore": cache["tree_digest_before"],
        "archive": {"uri": archive["record"], **_digest(archive["record_sha256"])}
        if archive
        else None,
    }


def _image(image: Json) -> dict[str, Any]:
    algorithm, _, value = image["id"].partition(":")
    return {
        "name": (image["tags"] or [image["id"]])[0],
        "tags": image["tags"],
        "digest": {algorithm: value} if value else {"id": image["id"]},
        "labels": image["labels"],
    }


def _manifest(manifest: Json) -> dict[str, Any]:
    return {
        "name": manifest["name"],
        **_digest(manifest["digest"]),
        "pins": manifest["pins"],
        "tuned": manifest["tuned"],
        "notRevalidated": manifest["not_revalidated"],
    }
