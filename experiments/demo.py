"""The demo's experiments (`manage.py ctxobs_up`, once the example agent has filled the demo
project): a set of its turns with the suggested checks confirmed, and "summarise history to 30%"
and "without memory" run against "as saved" on the project's default endpoint (the embedded
model), so that a newcomer finds the comparison filled: the checks measure something (the facts
the turns' memory holds, their pinned constraints) and both strategies change every turn."""

from __future__ import annotations

from core.models import Project
from experiments.models import EvalSet
from experiments.services import runs, sets, strategies

DEMO_SET = "demo turns"
DEMO_ITEMS = 8
DEMO_SAMPLES = 2
DEMO_STRATEGIES = ("summarise history to 30%", "without memory")


def demo_experiments(project: Project) -> str:
    """Build the demo set and start its experiments, once (nothing when the set exists)."""
    if EvalSet.objects.filter(project=project, name=DEMO_SET).exists():
        return ""
    seeds = sets.seeds_from_filter(project=project, flt={})

    def fit(seed: sets.ItemSeed) -> tuple[bool, int]:
        # Turns with a history and a memory block are where both strategies have something to do,
        # and those with suggested checks are where the comparison measures more than tokens.
        kinds = {b.get("kind") for b in seed.snapshot.get("blocks") or []}
        return {"history", "memory"} <= kinds, len(seed.suggestions)

    chosen = sorted(seeds, key=fit, reverse=True)[:DEMO_ITEMS]
    if not chosen:
        return ""
    eval_set = sets.eval_set_create(
        project=project,
        name=DEMO_SET,
        seeds=chosen,
        note="the demo agent's turns",
        description="Turns of the example agent, with the checks ctxobs suggested for them.",
    )
    sets.eval_set_suggestions_confirm_all(eval_set=eval_set)
    version = sets.latest_version(eval_set)
    started = [runs.experiment_start(project=project, set_version=version, samples=DEMO_SAMPLES)]
    for name in DEMO_STRATEGIES:
        sv = strategies.strategy_latest(strategies.preset_ensure(project=project, name=name))
        started.append(
            runs.experiment_start(
                project=project, set_version=version, strategy_version=sv, samples=DEMO_SAMPLES
            )
        )
    return (
        f"the demo set '{DEMO_SET}' ({len(chosen)} turns) runs {len(started)} experiments "
        f"(as saved, {', '.join(DEMO_STRATEGIES)}) on the local model"
    )
