"""The Python peers, each as its documentation shows it consuming a topic, with the same per-record
function and sink as Sluice's paths: Quix Streams (``Application`` + ``StreamingDataFrame``),
Bytewax (its ``KafkaSource``, one worker, ``run_main``), faust-streaming (an agent on the topic)
and the floor, a raw aiokafka ``getmany`` loop.  One process each, as each is deployed by default;
they read from the earliest offset with a fresh consumer group (aiokafka: assigned partitions)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import Any


def aiokafka_loop(ctx: Any, ready: Callable[[], None]) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=ctx.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition(ctx.topic, p) for p in range(ctx.partitions)])
            ready()
            fn, add, done = ctx.fn, ctx.sink.add, ctx.sink.done
            while not done.is_set():
                ctx.check()
                for messages in (await consumer.getmany(timeout_ms=200)).values():
                    for m in messages:
                        add(*fn(m.value))
        finally:
            await consumer.stop()

    asyncio.run(run())


def quix(ctx: Any, ready: Callable[[], None]) -> None:
    from quixstreams import Application

    logging.getLogger("quixstreams").setLevel(logging.WARNING)
    app = Application(
        broker_address=ctx.bootstrap,
        consumer_group=ctx.group,
        auto_offset_reset="earliest",
        state_dir=str(ctx.tmp / "quix-state"),
        loglevel="WARNING",
        use_changelog_topics=False,
    )
    topic = app.topic(ctx.topic, value_deserializer="bytes")
    fn, add, sink = ctx.fn, ctx.sink.add, ctx.sink

    def each(v: bytes) -> None:
        add(*fn(v))
        if sink.done.is_set():
            app.stop()

    app.dataframe(topic).update(each)
    ready()
    app.run()


def bytewax(ctx: Any, ready: Callable[[], None]) -> None:
    from bytewax import operators as op
    from bytewax.connectors.kafka import KafkaSource
    from bytewax.dataflow import Dataflow
    from bytewax.testing import run_main

    fn, add, sink = ctx.fn, ctx.sink.add, ctx.sink

    class Done(Exception):
        """Raised out of the dataflow once the sink has every record (a tailing source never ends)."""

    def each(_step: str, msg: Any) -> None:
        add(*fn(msg.value))
        if sink.done.is_set() and ctx.tail:
            raise Done

    flow = Dataflow("peers")
    source = KafkaSource([ctx.bootstrap], [ctx.topic], tail=ctx.tail, add_config={"group.id": ctx.group})
    op.inspect("sink", op.input("in", flow, source), each)
    ready()
    try:
        run_main(flow)
    except Exception as exc:  # run_main wraps what a step raised; Done means finished
        if not sink.done.is_set():
            raise RuntimeError(f"bytewax stopped at {sink.count} records: {exc}") from exc


def faust(ctx: Any, ready: Callable[[], None]) -> None:
    import faust as faust_lib

    app = faust_lib.App(
        ctx.group,
        broker=f"kafka://{ctx.bootstrap}",
        value_serializer="raw",
        store="memory://",
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        topic_partitions=ctx.partitions,
        datadir=str(ctx.tmp / "faust"),
    )
    topic = app.topic(ctx.topic, value_serializer="raw")
    fn, add, sink = ctx.fn, ctx.sink.add, ctx.sink

    @app.agent(topic)
    async def each(stream: Any) -> None:
        async for v in stream:
            add(*fn(v))
            if sink.done.is_set():
                os.kill(os.getpid(), signal.SIGTERM)  # the worker's own graceful stop

    ready()
    worker = faust_lib.Worker(app, loglevel="WARNING", quiet=True)
    try:
        worker.execute_from_commandline()
    except SystemExit:
        pass
    if not sink.done.is_set():
        raise RuntimeError(f"faust stopped at {sink.count} records")


PATHS: dict[str, Callable[[Any, Callable[[], None]], None]] = {
    "quixstreams": quix,
    "bytewax": bytewax,
    "faust-streaming": faust,
    "aiokafka": aiokafka_loop,
}
