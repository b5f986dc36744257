"""A result's chain as an in-toto Statement (v1), for standard attestation tooling.

The subject is the result, named `result/<id>`, with the sha256 of its canonical JSON (keys
sorted, `,` and `:` separators, UTF-8: the `result` object of its archived record, or
`audit result --json` less its `digest` key). The predicate (type PREDICATE_TYPE, a URN: no
document is hosted for it) lists what produced the result, each with its digest:

    boot       id, host, times, profile, hooks, instrumented, outcome; log digest
    caches     id, name, cold/warm, treeDigest (lifecycle's tree digest: sha256 over the
               sorted entries) and the archive record (uri, digest) when archived
    image      tags, digest (the image id), labels
    manifest   name, digest (the manifest digest), pins, tuned values, notRevalidated
    patches    name (file) and digest of each patch, in series order

The statement is left unsigned: sign it with the tool of your choice (e.g. an in-toto or
DSSE signer); its bytes are stable for a given chain.
"""

from __future__ import annotations

from typing import Any

from lifecycle.audit.chain import Chain, Json

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
