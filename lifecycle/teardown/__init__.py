"""Teardown: remove boot caches whose evidence is verified in S3, journalled and crash-safe.

`survey` gathers the facts and `plan` decides what goes and why; `run` carries the plan out,
each cache through `execute` (two journalled phases, the `invariant` checked again under its
lease); `journal` finds runs a crash left unfinished; `containers` asks dockerd, `verify` S3.
"""
