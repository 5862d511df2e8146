"""One PNG per scenario: records per batch against capacity, and scheduling delay, per estimator.

Records per batch (what the receivers actually admitted) rather than the published rate,
because it is what the executors had to process and it includes the batches filled before
the first estimate; capacity is drawn under it so overshoot and starvation are visible.
matplotlib is imported only here and with the Agg backend, so the arena runs headless and
without matplotlib installed unless plots are asked for.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable

from sluice.testing.arena.runner import Result

__all__ = ["plot_results"]


def plot_results(results: Iterable[Result], directory: str) -> list[str]:
    """Write ``<directory>/<scenario>.png`` for each scenario in ``results``; return the paths."""
    # matplotlib loads only to draw the plots
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"), so no display is needed

    os.makedirs(directory, exist_ok=True)
    by_scenario: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        by_scenario[result.trace.scenario].append(result)
    paths = []
    for scenario, runs in by_scenario.items():
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
        first = runs[0].trace
        interval_s = first.batch_interval_ms / 1000
        xs = [b.index for b in first.batches]
        top.plot(
            xs,
            [b.capacity_records / interval_s for b in first.batches],
            color="black",
            linestyle="--",
            linewidth=1,
            label="capacity",
        )
        for run in runs:
            batches = run.trace.batches
            label = f"{run.trace.estimator} (steady after {run.metrics.batches_to_steady})"
            top.plot([b.index for b in batches], [b.records / interval_s for b in batches], label=label)
            bottom.plot(
                [b.index for b in batches], [b.scheduling_ms / 1000 for b in batches], label=run.trace.estimator
            )
        top.set_ylabel("records/s admitted")
        top.set_title(f"arena: {scenario}")
        top.legend(loc="best", fontsize="small")
        bottom.axhline(interval_s, color="grey", linestyle=":", linewidth=1)
        # Linear up to one interval, logarithmic beyond: a runaway queue (a constant rate above
        # capacity) must not flatten the curves that matter into the axis.
        bottom.set_yscale("symlog", linthresh=interval_s)
        bottom.set_ylabel("scheduling delay (s, log above 1 interval)")
        bottom.set_xlabel("batch")
        bottom.legend(loc="best", fontsize="small")
        fig.tight_layout()
        path = os.path.join(directory, f"{scenario}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths
