"""BlockGenerator: Spark's BlockGeneratorSuite behaviours on a manual clock, plus the bounded queue."""

from __future__ import annotations

import asyncio

import pytest

from sluice.block_info import ReceivedBlockInfo
from sluice.clock import ManualClock
from sluice.errors import InvalidArgument
from sluice.receiver.block_generator import BlockGenerator, BlockGeneratorError, GeneratorState
from sluice.receiver.rate_limiter import RateLimiter
from sluice.receiver.timer import RecurringTimer
from sluice.storage.block_format import KafkaPiece
from sluice.tracker.server.received_block_tracker import Allocation, ReceivedBlockTracker

INTERVAL = 100


class RecordingListener:
    def __init__(self) -> None:
        self.added: list[tuple[object, object]] = []
        self.generated: list[tuple[str, GeneratorState]] = []
        self.pushed: list[tuple[str, list]] = []
        self.errors: list[tuple[str, BaseException | None]] = []
        self.fail_next_pushes = 0
        self.gate: asyncio.Event | None = None  # when set to a cleared Event, pushes wait on it
        self.generator: BlockGenerator | None = None
        self._changed = asyncio.Event()

    def on_add_data(self, data, metadata) -> None:
        self.added.append((data, metadata))

    def on_generate_block(self, block_id: str) -> None:
        assert self.generator is not None
        self.generated.append((block_id, self.generator.state))

    async def on_push_block(self, block_id: str, records: list, num_records: int) -> None:
        pieces = records and type(records[0]) is KafkaPiece
        assert num_records == (sum(p.num_records for p in records) if pieces else len(records))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_next_pushes:
            self.fail_next_pushes -= 1
            raise OSError("disk on fire")
        self.pushed.append((block_id, list(records)))
        self._changed.set()

    def on_error(self, message: str, error: BaseException | None) -> None:
        self.errors.append((message, error))
        self._changed.set()

    async def wait_for(self, predicate, timeout: float = 5.0) -> None:
        async def wait() -> None:
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)


def make(clock: ManualClock, listener: RecordingListener, **kwargs) -> BlockGenerator:
    gen = BlockGenerator(listener, 0, "r1", block_interval_ms=INTERVAL, clock=clock, **kwargs)
    listener.generator = gen
    return gen


async def test_blocks_per_interval_named_for_the_interval_start():
    clock, listener = ManualClock(0), RecordingListener()
    gen = make(clock, listener)
    gen.start()
    assert gen.is_active()
    for i in range(5):
        await gen.add_data_with_callback(i, f"meta{i}")
    assert listener.added == [(i, f"meta{i}") for i in range(5)]
    await clock.wait_for_sleepers()
    clock.advance(INTERVAL)  # tick at 100: block of [0, 100)
    await listener.wait_for(lambda: len(listener.pushed) == 1)
    assert listener.pushed == [("input-0-r1-0", [0, 1, 2, 3, 4])]
    assert listener.generated == [("input-0-r1-0", GeneratorState.ACTIVE)]

    await clock.wait_for_sleepers()
    clock.advance(INTERVAL)  # empty interval: no block
    await clock.wait_for_sleepers()
    await gen.add_data(10)
    await gen.add_multiple_data_with_callback([11, 12], "batch")
    assert listener.added[-1] == ([11, 12], "batch")  # one callback for the whole batch
    await clock.wait_for_sleepers()
    clock.advance(INTERVAL)  # tick at 300: block of [200, 300)
    await listener.wait_for(lambda: len(listener.pushed) == 2)
    assert listener.pushed[1] == ("input-0-r1-200", [10, 11, 12])
    stopping = asyncio.create_task(gen.stop())
    await asyncio.sleep(0)
    await clock.wait_for_sleepers()
    clock.advance(INTERVAL)
    await asyncio.wait_for(stopping, 5)
    assert not listener.errors


async def test_stop_order_pushes_last_partial_block_and_refuses_more_data():
    clock, listener = ManualClock(50), RecordingListener()
    gen = make(clock, listener)
    with pytest.raises(BlockGeneratorError, match="not been started"):
        await gen.add_data(0)
    gen.start()
    with pytest.raises(BlockGeneratorError, match="cannot start"):
        gen.start()
    await gen.add_data("a")
    await gen.add_data("b")
    stopping = asyncio.create_task(gen.stop())
    await asyncio.sleep(0)
    assert gen.state == GeneratorState.STOPPED_ADDING_DATA
    with pytest.raises(BlockGeneratorError, match="stopped"):
        await gen.add_data("late")
    await clock.wait_for_sleepers()
    clock.advance(50)  # the one more tick after stop, at 100
    await asyncio.wait_for(stopping, 5)
    assert gen.is_stopped()
    assert listener.generated == [("input-0-r1-0", GeneratorState.STOPPED_ADDING_DATA)]
    assert listener.pushed == [("input-0-r1-0", ["a", "b"])]
    with pytest.raises(BlockGeneratorError):
        await gen.add_data("after")
    await gen.stop()  # harmless
    assert gen.is_stopped()


async def test_stop_drains_the_queue_before_stopping_all():
    clock, listener = ManualClock(0), RecordingListener()
    listener.gate = asyncio.Event()
    gen = make(clock, listener, block_queue_size=5)
    gen.start()
    for t in range(3):
        await gen.add_data(t)
        await clock.wait_for_sleepers()
        clock.advance(INTERVAL)
        await asyncio.sleep(0)
    await gen.add_data(99)
    stopping = asyncio.create_task(gen.stop())
    await clock.wait_for_sleepers()
    clock.advance(INTERVAL)
    await listener.wait_for(lambda: len(listener.generated) == 4)
    await asyncio.sleep(0)
    assert gen.state == GeneratorState.STOPPED_GENERATING_BLOCKS
    assert not stopping.done()
    listener.gate.set()
    await asyncio.wait_for(stopping, 5)
    assert [r for _, r in listener.pushed] == [[0], [1], [2], [99]]


async def test_push_error_is_reported_and_pushing_goes_on():
    clock, listener = ManualClock(0), RecordingListener()
    listener.fail_next_pushes = 2
    gen = make(clock, listener, push_retry_initial_ms=10)
    gen.start()
    await gen.add_data(1)
    await clock.wait_for_sleepers()
    clock.advance(INTERVAL)
    await listener.wait_for(lambda: len(listener.errors) == 1)
    assert "input-0-r1-0" in listener.errors[0][0] and isinstance(listener.errors[0][1], OSError)
    await clock.wait_for_sleepers(2)  # the retry backoff and the timer
    clock.advance(10)
    await listener.wait_for(lambda: len(listener.errors) == 2)
    await clock.wait_for_sleepers(2)
    clock.advance(20)  # backoff doubles
    await listener.wait_for(lambda: len(listener.pushed) == 1)
    await gen.add_data(2)
    clock.set_time(2 * INTERVAL)
    await listener.wait_for(lambda: len(listener.pushed) == 2)
    assert [r for _, r in listener.pushed] == [[1], [2]]
    assert gen.push_errors == 2


async def test_memory_is_bounded_when_pushing_stalls_and_resumes():
    clock, listener = ManualClock(0), RecordingListener()
    listener.gate = asyncio.Event()
    queue_size, max_records = 3, 10
    gen = make(clock, listener, block_queue_size=queue_size, max_block_records=max_records)
    gen.start()
    produced = 0
    highest_held = 0

    async def produce() -> None:
        nonlocal produced
        while produced < 400:
            await gen.add_multiple_data_with_callback(list(range(produced, produced + 5)), None)
            produced += 5

    producer = asyncio.create_task(produce())
    for _ in range(30):
        await asyncio.sleep(0)
        clock.advance(INTERVAL)
        for _ in range(5):
            await asyncio.sleep(0)
        highest_held = max(highest_held, gen.blocks_held)
    assert not producer.done()  # store waits: nothing grows without bound
    assert gen.blocks_held <= queue_size + 2
    assert gen.buffered_records <= max_records
    assert produced <= (queue_size + 2) * max_records + max_records
    assert highest_held <= queue_size + 2
    listener.gate.set()  # the tracker answers again
    while not producer.done():
        clock.advance(INTERVAL)
        await asyncio.sleep(0.001)
    stopping = asyncio.create_task(gen.stop())
    while not stopping.done():
        clock.advance(INTERVAL)
        await asyncio.sleep(0.001)
    records = [r for _, block in listener.pushed for r in block]
    assert records == list(range(400))
    assert all(len(block) <= max_records + 5 for _, block in listener.pushed)


async def test_rate_limiter_paces_adds():
    clock, listener = ManualClock(0), RecordingListener()
    gen = make(clock, listener, rate_limiter=RateLimiter(rate=10, clock=clock))
    gen.start()
    assert await gen.add_multiple_data_with_callback(list(range(10)), None) == 0.0
    adding = asyncio.create_task(gen.add_multiple_data_with_callback(list(range(10)), None))
    await clock.wait_for_sleepers(2)
    clock.advance(999)
    await asyncio.sleep(0)
    assert not adding.done()
    clock.advance(1)
    assert await adding == pytest.approx(1.0)
    gen.abort()


async def test_flush_pushes_held_records_now_with_a_distinct_block_id():
    clock, listener = ManualClock(0), RecordingListener()
    gen = make(clock, listener)
    gen.start()
    await gen.add_data("x")
    clock.set_time(30)
    await gen.flush()
    assert listener.pushed == [("input-0-r1-0-f1", ["x"])]
    await gen.add_data("y")
    clock.set_time(INTERVAL)
    await listener.wait_for(lambda: len(listener.pushed) == 2)
    assert listener.pushed[1] == ("input-0-r1-0", ["y"])
    await gen.flush()  # nothing held: returns at once
    gen.abort()


async def test_recurring_timer_ticks_at_multiples_and_once_after_stop():
    clock = ManualClock(1_234)
    times: list[float] = []

    async def callback(t: float) -> None:
        times.append(t)

    timer = RecurringTimer(clock, 100, callback, "test")
    assert timer.start() == 1_300
    await clock.wait_for_sleepers()
    clock.set_time(1_550)
    await asyncio.sleep(0)
    for _ in range(5):
        await asyncio.sleep(0)
    assert times == [1_300, 1_400, 1_500]
    stopping = asyncio.create_task(timer.stop())
    await clock.wait_for_sleepers()
    clock.advance(50)
    assert await stopping == 1_600
    assert times == [1_300, 1_400, 1_500, 1_600]
    assert await timer.stop() == 1_600


async def test_recurring_timer_with_a_lead_runs_each_callback_early_with_its_multiple():
    clock = ManualClock(1_280)
    times: list[tuple[float, float]] = []  # (the time given, the time it ran)

    async def callback(t: float) -> None:
        times.append((t, clock.now_ms()))

    with pytest.raises(InvalidArgument, match="below the period"):
        RecurringTimer(clock, 100, callback, "test", lead_ms=100)
    timer = RecurringTimer(clock, 100, callback, "test", lead_ms=25)
    assert timer.start() == 1_400  # 1_300 would have run at 1_275, before now
    await clock.wait_for_sleepers()
    clock.set_time(1_375)
    await clock.wait_for_sleepers()
    assert times == [(1_400, 1_375)]
    stopping = asyncio.create_task(timer.stop())
    await clock.wait_for_sleepers()
    clock.set_time(1_475)  # the one callback after the stop request runs early too
    assert await stopping == 1_500
    assert times == [(1_400, 1_375), (1_500, 1_475)]


STORE_MS = 20  # a block's write and its add_block, after its cut
ALLOCATE_MS = 5  # the driver's tick to its allocate_blocks at the tracker


class ReportingListener(RecordingListener):
    """Each pushed block reaches the tracker (the pure state machine) STORE_MS after its cut."""

    def __init__(self, clock: ManualClock, tracker: ReceivedBlockTracker) -> None:
        super().__init__()
        self.clock, self.tracker = clock, tracker

    async def on_push_block(self, block_id: str, records: list, num_records: int) -> None:
        info = ReceivedBlockInfo(0, block_id, "r1", num_records, f"file:///blocks/stream-0/{block_id}.blk")
        self.clock.call_at(self.clock.now_ms() + STORE_MS, self.tracker.add_block, info)


@pytest.mark.parametrize(("lead_ms", "batch"), [(0, 2_000), (25, 1_000)])
async def test_the_block_ending_on_a_batch_boundary_makes_that_batch_when_cut_a_lead_early(lead_ms, batch):
    """Cut on its interval's end, the block of [900, 1000) is reported after the allocation of batch
    1000 and waits for batch 2000 (Spark's race); cut 25 ms early, it is reported before and taken."""
    clock, tracker = ManualClock(0), ReceivedBlockTracker()
    listener = ReportingListener(clock, tracker)
    gen = make(listener=listener, clock=clock, block_lead_ms=lead_ms)
    allocations: dict[int, Allocation | None] = {}

    def allocate(t: int) -> None:
        allocations[t] = tracker.allocate_blocks(t)

    for t in (1_000, 2_000):
        clock.call_at(t + ALLOCATE_MS, allocate, t)
    gen.start()
    await clock.wait_for_sleepers(3)  # the two allocations and the timer
    clock.set_time(950)
    await clock.wait_for_sleepers(3)  # the timer caught up, waiting for the tick of 1000
    await gen.add_data("record")
    clock.set_time(1_000 - lead_ms)  # the tick of 1000: the block of [900, 1000) is cut
    await clock.wait_for_sleepers(4)  # and pushed: its report is due
    clock.set_time(2_000 + ALLOCATE_MS)
    assert sorted(allocations) == [1_000, 2_000]
    taken = {t: [b.block_id for b in a[0]] for t, a in allocations.items() if a and a.get(0)}
    assert taken == {batch: ["input-0-r1-900"]}
    gen.abort()


async def test_records_of_the_lead_go_into_the_next_block_under_its_interval_name():
    clock, listener = ManualClock(0), RecordingListener()
    gen = make(clock, listener, block_lead_ms=INTERVAL)  # at most half the interval is used
    gen.start()
    await gen.add_data("a")
    await clock.wait_for_sleepers()
    clock.set_time(INTERVAL / 2)  # the tick of 100, half an interval early
    await listener.wait_for(lambda: len(listener.pushed) == 1)
    await gen.add_data("b")  # at 50: in the block of [100, 200)
    await gen.flush()
    assert listener.pushed == [("input-0-r1-0", ["a"]), ("input-0-r1-100-f1", ["b"])]
    with pytest.raises(InvalidArgument, match="block_lead_ms"):
        make(clock, listener, block_lead_ms=-1)
    gen.abort()
