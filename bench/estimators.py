"""Cost of one ``compute`` per built-in estimator, in microseconds, against a trivial call.

Why a ratio: absolute microseconds depend on the machine and its load (the test box is shared),
while "N plain Python calls" does not, so the peer is measured in the same alternating rounds with
the same loop and arguments.  The rate controller runs once per batch (seconds apart), so anything
under ~100 us is irrelevant to throughput; this bench is here to keep it that way.

Run: ``.venv/bin/python bench/estimators.py [--quick] [--rounds R] [--iterations N]``: one JSON line
per estimator (us per call, median/min/max over the rounds, the trivial call as peer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from harness import alternate, figure, options, parser, say

from sluice import estimators
from sluice.estimators.builtin import FACTORIES

Compute = Callable[[int, int, int, int], float | None]  # an estimator's compute, or the peer's call
OPTIONS = {"constant": {"rate": 1000.0}}  # built-ins that need options to be built


def trivial(time_ms: int, elements: int, processing_delay_ms: int, scheduling_delay_ms: int) -> None:
    """The peer: a Python call with the same four arguments that does nothing."""
    return None


def per_call_us(compute: Compute, iterations: int) -> float:
    """Microseconds per call over one loop, time advancing so the PID's guard passes."""
    times = list(range(1000, 1000 + 1000 * iterations, 1000))
    started = time.perf_counter()
    for t in times:
        compute(t, 2000, 1000, 10)
    return (time.perf_counter() - started) / iterations * 1e6


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--iterations", type=int, default=None, help="calls per round (default 200,000; --quick 2,000)")
    args = options(p, argv)
    iterations = args.iterations or (2_000 if args.quick else 200_000)

    # a fresh estimator per round: the PID's guard needs time to advance past its last call
    factories: dict[str, Callable[[], Compute]] = {}
    for name in FACTORIES:
        try:
            estimators.create(name, 1000, OPTIONS.get(name, {}))
        except ValueError as exc:
            say(f"{name}: skipped ({exc})")
            continue
        factories[f"{name}.compute"] = partial(compute_of, name)
    factories["pid.compute (guard rejects)"] = guarded_pid
    say(f"{iterations} calls per round, {args.rounds} alternating rounds; peer: a trivial 4-argument Python call")
    for name, make in factories.items():

        def ours(r: int, make: Callable[[], Compute] = make) -> float:
            return per_call_us(make(), iterations)

        values = alternate(args.rounds, {"ours": ours, "peer": lambda r: per_call_us(trivial, iterations)})
        line = figure(
            "estimators",
            name,
            "us/call",
            values["ours"],
            peer=values["peer"],
            peer_name="trivial call",
            digits=4,
            iterations=iterations,
        )
        say(
            f"{name:<30} {line['median']:>8.3f} us/call ({line['min']:.3f}-{line['max']:.3f}), "
            f"x{line['ratio']:.1f} a trivial call"
        )


def compute_of(name: str) -> Compute:
    """The compute of a fresh estimator ``name``."""
    return estimators.create(name, 1000, OPTIONS.get(name, {})).compute


def guarded_pid() -> Compute:
    """A PID whose every later call has an earlier time: the guard path only."""
    pid = estimators.PIDRateEstimator(1000)
    pid.compute(10**9, 1, 1, 0)
    return pid.compute


if __name__ == "__main__":
    main()
