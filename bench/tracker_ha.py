"""Tracker on a shared log: durable acks/s with the log on S3 (moto) against the local log, the
log objects and S3 requests that load costs, and takeover time over repeated failovers.

Real processes throughout: moto's S3 server, ``sluice-tracker`` leaders and ``--standby``
processes, :class:`TrackerClient` connections keeping ``--window`` requests in flight.

* acks/s: the same load against a tracker whose log is on moto and one whose log is a local
  directory (fsync on), rounds alternating.  moto answers from memory on this host, so the figure
  is the protocol's cost (one PUT per group commit, its HTTP round trip), not a region's latency.
* log objects/s: the objects the S3 tracker wrote during its rounds (its status names its log
  position) over their time, at the acks/s it sustained; S3 requests/hour at that rate, plus the
  lease's renewals (one PUT per third of ``tracker.lease_ms``) and the standby's reads (a LIST
  and a GET of the lease per ``tracker.standby_poll_ms``).
* takeover: a leader and a standby on a fresh log; the leader is SIGKILLed and a client holding
  both addresses sends its next block.  Time from the kill to that block's acknowledgement, with the
  standby's own account of its part (read what was left, fence) from its log.

    .venv/bin/python bench/tracker_ha.py [--quick] [--rounds 5] [--blocks 8000] [--failovers 20]
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

from harness import alternate, figure, options, parser, report, say, series

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.embedded import TrackerProcess, start_tracker
from sluice.testing import MotoServer, start_moto
from sluice.tracker.client.tracker_client import TrackerClient

LEASE_MS = 6000  # the schema's tracker.lease_ms
POLL_MS = 500  # the schema's tracker.standby_poll_ms


BLOCKS = "file:///var/sluice/blocks"  # the store the blocks name (never written: the tracker checks names only)


def block(c: TrackerClient, client: int, i: int, tag: str) -> ReceivedBlockInfo:
    """Block ``i`` of receiver ``r<client>``, its id in the registration's id space."""
    block_id = f"input-0-r{client}-{c.incarnation(f'r{client}')}-{tag}-b{i}"
    return ReceivedBlockInfo(
        0,
        block_id,
        f"r{client}",
        500,
        f"{BLOCKS}/stream-0/{block_id}.blk",
        (OffsetRange(f"{tag}-{client}", 0, i * 500, (i + 1) * 500),),
    )


async def load(address: str, clients: int, per_client: int, window: int, tag: str) -> float:
    """Acked add_block per second with ``clients`` connections, ``window`` in flight each."""
    conns = [TrackerClient(address, "receiver", request_timeout=60) for _ in range(clients)]
    await asyncio.gather(*(c.start() for c in conns))
    await asyncio.gather(*(c.register_receiver(0, f"r{ci}", "bench") for ci, c in enumerate(conns)))
    started = time.perf_counter()

    async def worker(ci: int, c: TrackerClient) -> None:
        infos = [block(c, ci, i, tag) for i in range(per_client)]
        lanes = [infos[k::window] for k in range(window)]

        async def lane(lane_infos: list[ReceivedBlockInfo]) -> None:
            for info in lane_infos:
                await c.add_block(info)

        await asyncio.gather(*(lane(li) for li in lanes))

    await asyncio.gather(*(worker(ci, c) for ci, c in enumerate(conns)))
    elapsed = time.perf_counter() - started
    await asyncio.gather(*(c.close() for c in conns))
    return clients * per_client / elapsed


async def log_position(address: str) -> int:
    async with TrackerClient(address, "driver", request_timeout=30) as c:
        return int((await c.status())["leadership"]["log_position"])


async def first_ack_after_kill(leader: TrackerProcess, standby: TrackerProcess) -> float:
    async with TrackerClient(f"{leader.address},{standby.address}", "receiver", request_timeout=60) as c:
        await c.register_receiver(0, "r0", "bench")
        for i in range(20):
            await c.add_block(block(c, 0, i, "pre"))
        leader.stop(signal.SIGKILL)
        killed = time.monotonic()
        await c.add_block(block(c, 0, 0, "post"))
        return time.monotonic() - killed


def takeover(moto: MotoServer, tmp: Path, r: int) -> tuple[float, float]:
    """Seconds from SIGKILL to the first ack by the standby, and the standby's read-and-fence part."""
    url = f"s3://{moto.bucket()}/tracker"
    quiet = ["--log-level", "INFO"]
    leader = start_tracker(url, log=tmp / f"leader-{r}.log", env=moto.env, args=quiet, block_store=BLOCKS)
    standby = start_tracker(
        url, log=tmp / f"standby-{r}.log", env=moto.env, args=[*quiet, "--standby"], block_store=BLOCKS
    )
    try:
        total = asyncio.run(first_ack_after_kill(leader, standby))
    finally:
        standby.stop()
        leader.stop()
    found = re.search(r"fenced at object \d+ in ([0-9.]+)s", standby.log.read_text())
    return total, float(found.group(1)) if found else float("nan")


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--blocks", type=int, default=None, help="blocks per load round (default 8,000, --quick 400)")
    p.add_argument("--clients", type=int, default=4, help="client connections in the load rounds")
    p.add_argument("--window", type=int, default=64, help="requests in flight per client")
    p.add_argument("--failovers", type=int, default=None, help="takeovers measured (default 20, --quick 1)")
    args = options(p)
    blocks = args.blocks or (400 if args.quick else 8_000)
    failovers = args.failovers or (1 if args.quick else 20)
    per_client = blocks // args.clients
    with tempfile.TemporaryDirectory(prefix="sluice-bench-ha-") as name:
        tmp = Path(name)
        moto = start_moto(tmp / "moto")
        quiet = ["--log-level", "WARNING"]
        shared = start_tracker(
            f"s3://{moto.bucket()}/tracker", log=tmp / "s3.log", env=moto.env, args=quiet, block_store=BLOCKS
        )
        local = start_tracker(tmp / "wal", log=tmp / "local.log", args=quiet, block_store=BLOCKS)
        objects, seconds = 0, 0.0
        try:

            def on_s3(r: int) -> float:
                nonlocal objects, seconds
                before = asyncio.run(log_position(shared.address))
                started = time.perf_counter()
                rate = asyncio.run(load(shared.address, args.clients, per_client, args.window, f"s{r}"))
                seconds += time.perf_counter() - started
                objects += asyncio.run(log_position(shared.address)) - before
                return rate

            values = alternate(
                args.rounds,
                {
                    "s3": on_s3,
                    "local": lambda r: asyncio.run(load(local.address, args.clients, per_client, args.window, f"l{r}")),
                },
            )
        finally:
            shared.stop()
            local.stop()
        line = figure(
            "tracker_ha",
            f"durable add_block acks/s, log on S3 (moto), {args.clients} clients",
            "acks/s",
            values["s3"],
            peer=values["local"],
            peer_name="the log in a local directory, fsync on",
            digits=0,
            window=args.window,
        )
        say(
            f"durable acks/s with the log on moto: median {line['median']:,.0f} "
            f"({line['min']:,.0f}-{line['max']:,.0f}); local log {line['peer']['median']:,.0f}; "
            f"ratio {line['ratio']:.2f}"
        )
        per_second = objects / seconds
        puts_per_hour = per_second * 3600 + 3600 / (LEASE_MS / 3000)
        standby_per_hour = 2 * 3600 / (POLL_MS / 1000)
        report(
            "tracker_ha",
            name="log objects and S3 requests at the load above",
            acks_per_second=round(line["median"]),
            log_objects_per_second=round(per_second, 1),
            acks_per_object=round(line["median"] / per_second, 1) if per_second else None,
            leader_puts_per_hour=round(puts_per_hour),
            standby_reads_per_hour=round(standby_per_hour),
        )
        say(
            f"log objects/s at that load: {per_second:,.1f} ({line['median'] / max(per_second, 1e-9):,.1f} acks per "
            f"object); leader PUTs/hour {puts_per_hour:,.0f}, a standby's LIST+GET/hour {standby_per_hour:,.0f}"
        )
        times = [takeover(moto, tmp, r) for r in range(failovers)]
        moto.stop()
    line = figure(
        "tracker_ha",
        f"takeover: SIGKILL of the leader to the first ack by the standby, lease {LEASE_MS} ms",
        "s",
        [t for t, _ in times],
        digits=2,
        target="<= 10",
        target_of="max",
        read_and_fence_s=series([f for _, f in times], 3),
    )
    say(
        f"takeover over {failovers} failover(s): median {line['median']:.2f} s ({line['min']:.2f}-{line['max']:.2f}); "
        f"the standby's read and fence {line['read_and_fence_s']['median']:.3f} s; the rest is the lease lapsing"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
