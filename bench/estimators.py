"""Cost of one ``compute`` per built-in estimator, in microseconds, against a trivial call.

Why a ratio: absolute microseconds depend on the machine and its load (the test box is shared),
while "N plain Python calls" does not, so the peer is measured in the same run with the same
loop and arguments.  The rate controller runs once per batch (seconds apart), so anything
under ~100 us is irrelevant to throughput; this bench is here to keep it that way.

Run: ``.venv/bin/python bench/estimators.py [--iterations N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import timeit

from harness import report

from sluice import estimators
from sluice.estimators.builtin import FACTORIES

OPTIONS = {"constant": {"rate": 1000.0}}   # built-ins that need options to be built


def trivial(time_ms: int, elements: int, processing_delay_ms: int, scheduling_delay_ms: int) -> None:
    """The peer: a Python call with the same four arguments that does nothing."""
    return None


def per_call_us(compute, iterations: int, repeat: int) -> float:
    """Best-of-``repeat`` microseconds per call, time advancing so the PID's guard passes."""
    times = list(range(1000, 1000 + 1000 * iterations, 1000))

    def loop() -> None:
        for t in times:
            compute(t, 2000, 1000, 10)

    return min(timeit.repeat(loop, number=1, repeat=repeat)) / iterations * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    base = per_call_us(trivial, args.iterations, args.repeat)
    rows: list[tuple[str, float]] = []
    for name in FACTORIES:
        try:
            estimator = estimators.create(name, 1000, OPTIONS.get(name, {}))
        except ValueError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        rows.append((f"{name}.compute", per_call_us(estimator.compute, args.iterations, args.repeat)))
    pid = estimators.PIDRateEstimator(1000)
    pid.compute(10**9, 1, 1, 0)   # every later call has an earlier time: the guard path only
    rows.append(("pid.compute (guard rejects)", per_call_us(pid.compute, args.iterations, args.repeat)))

    print(f"{args.iterations} calls, best of {args.repeat}; peer: a trivial 4-argument Python "
          f"function = {base:.3f} us/call")
    print(f"{'estimator':<30} {'us/call':>9} {'x trivial call':>15}")
    for name, cost in rows:
        print(f"{name:<30} {cost:>9.3f} {cost / base:>15.1f}")
    report("estimators", trivial_call_us=round(base, 4), us_per_call={name: round(cost, 4) for name, cost in rows})


if __name__ == "__main__":
    main()
