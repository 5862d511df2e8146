"""Fault campaign: a Sluice pipeline on hosts of its own (network namespaces), a seeded schedule of
faults (kills, pauses, partitions, one-way drops, a slow or absent store, broker restarts), then
the checker: records lost and duplicated against the topic, recovery after each healing, RSS growth.

    .venv/bin/python bench/chaos.py [--quick] [--minutes 30] [--seed 1] [--rate 50] [--keep DIR]

Needs root (``ip netns``), iproute2 and nftables (``scripts/system-deps.sh`` installs them).  The
schedule is printed on stderr first: the same ``--seed`` and ``--minutes`` replay it.  One JSON
line: ``faults``, ``lost``, ``not_taken``, ``duplicated``, ``recovery_p50_s``, ``recovery_p99_s``
(from the last healing of each burst of faults), ``rss_growth`` (the largest service's %, over the
second half; the S3 stand-in's apart), and the series of recovery times.  A campaign has no peer
to compare with: its bar is 0 lost, 0 duplicated, recovery p99 <= 30 s, RSS growth <= 10 %.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness import figure, options, parser, say

from sluice.testing.chaos_campaign import run_campaign


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--minutes", type=float, default=30.0, help="campaign length (default 30; --quick: 40 s)")
    p.add_argument("--seed", type=int, default=1, help="the schedule's seed (default 1)")
    p.add_argument("--rate", type=float, default=50.0, help="records/s the producer writes (default 50)")
    p.add_argument("--keep", type=Path, help="run in this directory and keep its logs and output")
    args = options(p)
    seconds = 40.0 if args.quick else args.minutes * 60
    if args.keep is not None and args.keep.exists() and (not args.keep.is_dir() or any(args.keep.iterdir())):
        # a previous run's output there would be read as this run's: its offsets as duplicates
        p.error(f"--keep must name a new or empty directory, got {args.keep}, which holds files")
    if seconds < 40:
        p.error(f"--minutes must be at least 0.67 (40 s), got {args.minutes}")
    with tempfile.TemporaryDirectory(prefix="sluice-chaos-") as tmp:
        directory = args.keep or Path(tmp)
        result = run_campaign(directory, args.seed, seconds, rate=args.rate, say=say)
    times = result.pop("recovery_times_s")
    name = (
        f"recovery after healing; seed {args.seed}, {seconds / 60:.0f} min, {result['faults']} faults: "
        f"{result['lost']} lost, {result['not_taken']} not taken from Kafka, {result['duplicated']} duplicated, "
        f"RSS growth {result['rss_growth']} %"
    )
    figure("chaos", name, "s", times or [0.0], digits=1, **result)


if __name__ == "__main__":
    main()
