"""Send each line of standard input to a Kafka topic as one record (the tutorial's producer).

    printf 'hello world\n' | python examples/produce.py --bootstrap-servers 127.0.0.1:9092 --topic events

It waits for the broker to acknowledge every record, then prints how many it sent.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from aiokafka import AIOKafkaProducer


async def produce(bootstrap: str, topic: str, lines: list[str]) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for line in lines:
            await producer.send_and_wait(topic, line.encode())
    finally:
        await producer.stop()
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument("--topic", required=True)
    args = parser.parse_args()
    lines = [line.rstrip("\n") for line in sys.stdin if line.strip()]
    sent = asyncio.run(produce(args.bootstrap_servers, args.topic, lines))
    print(f"sent {sent} records to {args.topic}")


if __name__ == "__main__":
    main()
