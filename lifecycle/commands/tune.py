"""`lifecycle tune VERSION LADDER.yaml` and `lifecycle tune VERSION --revalidate`.

A ladder runs as a night of rungs (lifecycle.night.plan): its predictions registered first,
every rung cold and warm at the forced shape, the chosen value written into VERSION's manifest
as validated with the conditions it was measured in. `--revalidate` measures each carried value
again by its recorded ladder: it becomes validated, or a new value is proposed (exit 1).
"""

from __future__ import annotations

from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.commands.night import plan_only, run_plan
from lifecycle.errors import LifecycleError
from lifecycle.manifest import find_manifest, load_manifest
from lifecycle.night.plan import ladder_plan, revalidation_plan
from lifecycle.night.prepare import DryRun
from lifecycle.night.run import NightOutcome, NightRequest


def run(ctx: Context, options: verbs.Tune) -> NightOutcome | DryRun:
    """Climb the ladder (or revalidate), as a night of kind `tune`."""
    if (options.ladder is None) != options.revalidate:
        raise LifecycleError("give a LADDER file, or --revalidate (not both)")
    if options.ladder is not None:
        loaded = ladder_plan(options.ladder, options.version)
    else:
        manifest = load_manifest(find_manifest(ctx.manifests_dir, options.version))
        loaded = revalidation_plan(options.version, manifest)
    if options.dry_run:
        return plan_only(ctx, loaded)
    request = NightRequest(loaded, kind="tune", new=options.new, revalidate=options.revalidate)
    return run_plan(ctx, request, options)
