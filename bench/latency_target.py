"""The latency target against the throughput target, on the real pipeline across a capacity step.

Each round runs :mod:`sluice.demo.latency_target` once per target, the order alternating (tracker
and generator receiver processes, Spark's PID, 500 ms batches, 100 ms blocks, target 1,000 ms, the
cost per record up 5/3 after 10 batches; figures over 12 batches after 8 of settling).  One JSON
line per figure (records' latency p50 and p99 in ms, throughput in records/s): the latency
target's series against the throughput target's from the same rounds, with the ratio of medians.

    .venv/bin/python bench/latency_target.py [--quick] [--rounds 3]
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness import alternate, figure, options, parser, say, spark_session

from sluice.demo.latency_target import TARGET_MS, LatencyRun, record_latency

BENCH = "latency_target"


def main() -> None:
    args = options(parser(__doc__, rounds=3))
    spark = spark_session(BENCH)
    tmp = Path(tempfile.mkdtemp(prefix="sluice-latency-target-"))

    def side(target: str):
        def one(round_no: int) -> dict[str, float]:
            shape = LatencyRun(step_at=2, settle=1, window_batches=2) if args.quick else None
            where = tmp / f"{target}-{round_no}"
            where.mkdir()
            figures = record_latency(spark, where, target, shape).figures()
            say(f"round {round_no} {target}: {figures}")
            return figures

        return one

    runs = alternate(args.rounds, {"latency": side("latency"), "throughput": side("throughput")})
    for name, unit in (("latency_p50_ms", "ms"), ("latency_p99_ms", "ms"), ("throughput", "records/s")):
        figure(
            BENCH,
            name,
            unit,
            [r[name] for r in runs["latency"]],
            peer=[r[name] for r in runs["throughput"]],
            peer_name="throughput target",
            target=f"<= {TARGET_MS}" if name == "latency_p99_ms" else None,
            target_of="median",
        )
    spark.stop()


if __name__ == "__main__":
    main()
