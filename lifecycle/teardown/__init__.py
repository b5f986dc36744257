"""Teardown: remove boot caches whose evidence is verified in S3, journalled and crash-safe.

`survey` gathers the facts (ledger, dockerd through `containers`, S3) and `plan` decides what
goes and why; `run` carries the plan out, each cache through `removal` (the invariant checked
again under its lease, two journalled phases, and what a crash left unfinished).
"""
