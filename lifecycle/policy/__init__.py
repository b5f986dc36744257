"""The retention policy (`policy:` in lifecycle.yaml) and the plan that converges to it.

`model` is the policy as written; `facts` reads the caches it is evaluated on from the ledger;
`keep` says which stay and why (pure). Removal goes through teardown's decision and removal
invariant, the remote archive through gc's mark and sweep: one planner, three sources of rules.
"""
