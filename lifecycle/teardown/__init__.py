"""Teardown: remove boot caches whose evidence is verified in S3, journalled and crash-safe.

`plan` decides what goes and why, `execute` removes one cache in two phases, `journal` finds
runs a crash left unfinished, `containers` asks dockerd, `verify` asks S3, `faults` is test-only.
"""
