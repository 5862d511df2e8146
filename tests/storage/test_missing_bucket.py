"""A missing S3 bucket is named with the store's URL, at start and on every failed write, against
moto's real S3 server: a write never creates a bucket, so without this a receiver retries for ever."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sluice.embedded import free_port, receiver_argv
from sluice.storage import open_block_store
from sluice.storage.block_store import Block, BlockStoreError
from sluice.testing import MotoServer

pytestmark = pytest.mark.slow


def test_receiver_with_a_missing_bucket_exits_2_naming_url_and_bucket(s3: MotoServer) -> None:
    result = subprocess.run(
        [
            sys.executable,
            # the tracker is never reached: the store is checked first
            *receiver_argv(f"127.0.0.1:{free_port()}", source="generator", block_store="s3://no-such-bucket/blocks"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **s3.env},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "sluice-receiver: block store s3://no-such-bucket/blocks: bucket 'no-such-bucket' does not exist; "
        "create it first"
    ]


def test_check_passes_for_an_existing_bucket(s3: MotoServer) -> None:
    store = open_block_store(f"s3://{s3.bucket()}/blocks", s3.options)
    store.check()  # type: ignore[attr-defined]


def test_a_write_after_the_bucket_went_names_it(s3: MotoServer) -> None:
    bucket = s3.bucket()
    store = open_block_store(f"s3://{bucket}/blocks", s3.options)
    s3.client().delete_bucket(Bucket=bucket)
    with pytest.raises(BlockStoreError) as err:
        store.write(Block(0, "b1", [b"x"]))
    assert str(err.value).startswith(
        f"writing block b1 to s3://{bucket}/blocks/stream-0/b1.blk failed: bucket {bucket!r} of block store "
        f"s3://{bucket}/blocks does not exist"
    )
