"""moto's S3 server (``moto_server``, from the ``test`` extra's ``moto[server]``) on loopback, for the
tests and benchmarks of the S3 block store and the tracker's log on an object store."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.embedded.processes import ProcessError, free_port, start_process, stop_process, wait_for_port

__all__ = ["MotoServer", "start_moto"]


@dataclass
class MotoServer:
    """moto's S3 server (``moto_server``) on loopback, in memory: a restart on the same port is empty.

    :param port: the port it listens on.
    :param log: its output, one line per request it answered.
    :param proc: the process while it runs.
    """

    port: int
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to reach this server through botocore's usual chain."""
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    @property
    def options(self) -> dict[str, Any]:
        """The same as a ``[block_store.options]`` table (no environment needed)."""
        return {
            "endpoint_url": self.endpoint,
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }

    def start(self) -> MotoServer:
        """Start it (again, after :meth:`stop`) and wait until it listens."""
        binary = Path(sys.executable).parent / "moto_server"
        if not binary.exists():
            raise ProcessError(f"moto's S3 server needs moto[server] (pip install -e '.[test]'): no {binary}")
        self.proc = start_process([str(binary), "-H", "127.0.0.1", "-p", str(self.port)], log=self.log)
        wait_for_port(self.port, self.proc, name="moto's S3 server")
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig)

    def client(self) -> Any:
        # boto3 (the test extra) loads only when a test asks for a client
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh name unless given) and return its name."""
        name = name or f"b-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """The bucket's keys under ``prefix`` (a listing, which Sluice's store itself never makes)."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def requests(self, since: int = 0, until: str | None = None) -> list[str]:
        """Requests the server answered (``"PUT /bucket/key"``), from the ``since``-th on; with
        ``until``, first wait (10 s at most) for one starting with it: a request is logged after its answer."""
        deadline = time.monotonic() + 10
        while True:
            text = re.sub(r"\x1b\[[0-9;]*m", "", self.log.read_text(errors="replace"))  # werkzeug's colours
            lines = re.findall(r'"([A-Z]+ \S+) HTTP/1\.[01]"', text)[since:]
            if until is None or any(line.startswith(until) for line in lines) or time.monotonic() > deadline:
                return lines
            time.sleep(0.05)


def start_moto(directory: Path, port: int | None = None) -> MotoServer:
    """moto's S3 server on a free loopback port (or ``port``), logging into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return MotoServer(port or free_port(), directory / "moto.log").start()
