"""fsspec block stores: fsspec's in-memory filesystem for the store's own logic, moto's S3 server for S3."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.block_info import OffsetRange, ReceivedBlockInfo
from sluice.config import ConfigError, resolve
from sluice.embedded import free_port, receiver_argv
from sluice.records import Record
from sluice.spark_driver.receiver_source import ReceiverSource
from sluice.storage import block_format
from sluice.storage.block_store import (
    Block,
    BlockCorruptError,
    BlockMissingError,
    BlockStoreError,
    FileBlockStore,
    open_block_store,
    read_block,
    store_url_of,
)
from sluice.storage.fsspec_store import FsspecBlockStore, task_options
from sluice.testing import MotoServer


def kafka_block(block_id: str = "input-0-r1-1000", n: int = 50) -> Block:
    records = [Record(b"k%d" % i, b"v%d" % i, "topic", 3, 100 + i, 1_700_000_000_000 + i) for i in range(n)]
    return Block(0, block_id, records, (OffsetRange("topic", 3, 100, 100 + n),))


MEMORY_PLUGIN = """
    from sluice.hookspecs import hookimpl
    from sluice.storage.fsspec_store import FsspecBlockStore

    @hookimpl
    def sluice_register_block_stores():
        return {"memory": FsspecBlockStore}
"""


@pytest.fixture
def memory_store(request, install_plugin) -> Iterator[FsspecBlockStore]:
    """A store on fsspec's in-memory filesystem, under a prefix of its own; the ``memory`` scheme is
    registered by a plugin, as docs/guide/clusters.md's "any other fsspec protocol" says."""
    import fsspec

    install_plugin("memory-store", MEMORY_PLUGIN)
    url = f"memory://sluice-tests/{request.node.name}"
    yield FsspecBlockStore(url, backoff_s=0.01)
    memory = fsspec.filesystem("memory")
    if memory.exists(url):
        memory.rm(url, recursive=True)


def test_round_trip_location_is_the_store_url_plus_stream_and_block(memory_store: FsspecBlockStore) -> None:
    block = kafka_block()
    location = memory_store.write(block)
    assert location == f"{memory_store.url}/stream-0/input-0-r1-1000.blk"
    assert memory_store.read(location) == block
    assert store_url_of(location) == memory_store.url
    assert read_block(location) == block  # the store is implied by the location


def test_corrupt_object_names_block_location_and_cause(memory_store: FsspecBlockStore) -> None:
    location = memory_store.write(kafka_block())
    path = memory_store._path(location)
    data = memory_store.fs.cat_file(path)
    memory_store.fs.pipe_file(path, data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(BlockCorruptError, match=f"block input-0-r1-1000 at {location} is corrupt: CRC32 mismatch"):
        memory_store.read(location)


def test_missing_object_names_block_and_location_and_is_not_retried(memory_store: FsspecBlockStore, caplog) -> None:
    location = memory_store.location_of(0, "gone")
    with pytest.raises(BlockMissingError, match=f"block gone is missing: no object at {location}"):
        memory_store.read(location)
    assert "retrying" not in caplog.text


def test_foreign_location_is_refused(memory_store: FsspecBlockStore) -> None:
    with pytest.raises(BlockStoreError, match="is not inside the block store"):
        memory_store.read("memory://elsewhere/stream-0/b.blk")


def test_delete_many_removes_blocks_and_ignores_missing_ones(memory_store: FsspecBlockStore) -> None:
    locations = [memory_store.write(kafka_block(f"b{i}", 3)) for i in range(3)]
    memory_store.delete_many([*locations, memory_store.location_of(0, "never-written")])
    for location in locations:
        with pytest.raises(BlockMissingError):
            memory_store.read(location)
    memory_store.delete(locations[0])  # again: no error


def test_a_failing_call_is_retried_with_backoff_then_names_url_and_cause(
    memory_store: FsspecBlockStore, caplog, monkeypatch
) -> None:
    """The fault here (a write that keeps failing) is one the in-memory filesystem cannot show by itself."""
    calls = []

    def refuse(path, data):
        calls.append(path)
        raise ConnectionResetError("peer went away")

    monkeypatch.setattr(memory_store.fs, "pipe_file", refuse)  # fsspec shares the filesystem: undone after
    memory_store.attempts = 3
    with pytest.raises(BlockStoreError) as info:
        memory_store.write(kafka_block())
    assert len(calls) == 3 and caplog.text.count("retrying in") == 2
    assert str(info.value) == (
        f"writing block input-0-r1-1000 to {memory_store.url}/stream-0/input-0-r1-1000.blk "
        "failed after 3 attempts: ConnectionResetError: peer went away"
    )


@pytest.mark.parametrize(
    "url, message",
    [
        (
            "gcs://bucket/blocks",
            "block store gcs://bucket/blocks: the gcs:// protocol needs a package that is not installed: .*gcsfs",
        ),
        (
            "abfs://container/blocks",
            "block store abfs://container/blocks: the abfs:// protocol needs a package that is not installed: .*adlfs",
        ),
        ("nosuch://bucket/blocks", "block store URL 'nosuch://bucket/blocks': unknown block store 'nosuch'"),
    ],
)
def test_unusable_protocol_is_named_with_what_to_install(url: str, message: str) -> None:
    with pytest.raises(BlockStoreError, match=message):
        open_block_store(url)


def test_fsspec_schemes_are_built_in_stores_and_file_takes_no_options(tmp_path: Path) -> None:
    from sluice.plugins import registry

    stores = registry("sluice_register_block_stores")
    assert {"file", "s3", "gs", "abfs", "hdfs"} <= set(stores.builtin())
    assert isinstance(open_block_store(tmp_path.as_uri()), FileBlockStore)
    assert isinstance(open_block_store("s3://bucket/blocks"), FsspecBlockStore)
    with pytest.raises(BlockStoreError, match="a file:// store takes no options"):
        open_block_store(tmp_path.as_uri(), {"endpoint_url": "http://x"})


def test_task_options_ship_the_drivers_aws_variables_unless_the_table_sets_them() -> None:
    env = {
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "sk",
        "AWS_SESSION_TOKEN": "tok",
        "AWS_ENDPOINT_URL": "http://s3.local:9000",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    assert task_options("s3://b/p", {}, env) == {
        "key": "id",
        "secret": "sk",
        "token": "tok",
        "endpoint_url": "http://s3.local:9000",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    table = {"key": "mine", "secret": "own", "endpoint_url": "http://other", "client_kwargs": {"region_name": "x"}}
    assert task_options("s3://b/p", table, env) == table
    assert task_options("s3://b/p", {"profile": "etl"}, env)["profile"] == "etl"
    assert "key" not in task_options("s3://b/p", {"profile": "etl"}, env)
    assert task_options("s3://b/p", {"anon": True}, env) == {"anon": True}
    assert "key" not in task_options("s3://b/p", {}, {"AWS_ACCESS_KEY_ID": "id"})  # half a key pair stays home
    assert task_options("gs://b/p", {"project": "p"}, env) == {"project": "p"}
    assert (
        task_options("s3://b/p", {}, {**env, "AWS_ENDPOINT_URL_S3": "http://s3only"})["endpoint_url"] == "http://s3only"
    )


def test_block_store_options_table_reaches_the_config(tmp_path: Path) -> None:
    config = tmp_path / "sluice.toml"
    config.write_text(
        '[receiver]\nblock_store = "s3://bucket/blocks"\n'
        '[block_store.options]\nendpoint_url = "http://127.0.0.1:9000"\n'
        '[block_store.options.client_kwargs]\nregion_name = "eu-west-1"\n'
    )
    values = resolve(["receiver", "block_store"], config_file=str(config), environ={})
    assert values["receiver.block_store"] == "s3://bucket/blocks"
    assert values["block_store.options"] == {
        "endpoint_url": "http://127.0.0.1:9000",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    with pytest.raises(ConfigError, match="receiver.block_store = 'bucket/blocks'.*expected a URL"):
        resolve(["receiver"], flags={"receiver.block_store": "bucket/blocks"}, environ={})


@pytest.mark.slow
def test_no_fsspec_import_unless_a_non_file_store_is_opened(tmp_path: Path) -> None:
    code = (
        "import sys; import sluice.config, sluice.storage, sluice.receiver.cli, sluice.spark_driver.cli; "
        "from sluice.storage import open_block_store; open_block_store(sys.argv[1]); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'fsspec', 's3fs', 'botocore', 'aiobotocore'}))"
    )
    out = subprocess.run([sys.executable, "-c", code, tmp_path.as_uri()], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_receiver_with_an_unusable_store_exits_2_naming_it() -> None:
    out = subprocess.run(
        [
            sys.executable,
            *receiver_argv(f"127.0.0.1:{free_port()}", source="generator", block_store="gcs://bucket/blocks"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert (
        out.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "sluice-receiver: block store gcs://bucket/blocks: the "
            "gcs:// protocol needs a package that is not installed"
        )
    )


def test_a_store_lists_a_streams_blocks_by_prefix_with_their_write_times(memory_store: FsspecBlockStore) -> None:
    """What a receiver deletes its own leftovers by (sluice.receiver.orphans)."""
    assert memory_store.stored_blocks(0, "input-0-r-") == []  # nothing written yet
    for block_id in ("input-0-r-1-10", "input-0-r-1-20", "input-0-q-1-10"):
        memory_store.write(kafka_block(block_id, 2))
    listed = sorted(memory_store.stored_blocks(0, "input-0-r-"), key=lambda b: b.block_id)
    assert [(b.block_id, b.location) for b in listed] == [
        ("input-0-r-1-10", memory_store.location_of(0, "input-0-r-1-10")),
        ("input-0-r-1-20", memory_store.location_of(0, "input-0-r-1-20")),
    ]
    assert all(time.time() - 60 < b.modified <= time.time() + 1 for b in listed)
    memory_store.delete(listed[0].location)
    assert [b.block_id for b in memory_store.stored_blocks(0, "input-0-r-")] == ["input-0-r-1-20"]


# -- S3, against moto's server ---------------------------------------------------------------------


@pytest.mark.slow
def test_s3_store_through_the_aws_environment(s3: MotoServer, monkeypatch) -> None:
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    bucket = s3.bucket()
    store = open_block_store(f"s3://{bucket}/blocks/")
    assert store.url == f"s3://{bucket}/blocks"
    block = kafka_block()
    before = len(s3.requests())
    location = store.write(block)
    assert location == f"s3://{bucket}/blocks/stream-0/input-0-r1-1000.blk"
    assert read_block(location) == block
    # A write is one PUT and a read one GET: no HEAD, no listing.
    key = f"/{bucket}/blocks/stream-0/input-0-r1-1000.blk"
    assert s3.requests(before, until=f"GET {key}") == [f"PUT {key}", f"GET {key}"]


@pytest.mark.slow
def test_s3_store_through_the_options_table_alone(s3: MotoServer, monkeypatch) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_PROFILE",
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    bucket = s3.bucket()
    store = open_block_store(f"s3://{bucket}/opts", s3.options)
    location = store.write(kafka_block())
    assert read_block(location, s3.options).records == kafka_block().records


@pytest.mark.slow
def test_s3_deletes_go_in_one_bulk_request(s3: MotoServer) -> None:
    bucket = s3.bucket()
    store = open_block_store(f"s3://{bucket}/bulk", s3.options)
    assert isinstance(store, FsspecBlockStore)
    locations = [store.write(kafka_block(f"b{i}", 2)) for i in range(25)]
    before = len(s3.requests())
    store.delete_many([*locations, store.location_of(0, "never-written")])
    assert s3.requests(before, until="POST") == [f"POST /{bucket}?delete"]
    assert s3.keys(bucket) == []


@pytest.mark.slow
def test_s3_listing_is_fresh_and_carries_each_objects_last_modified(s3: MotoServer) -> None:
    bucket = s3.bucket()
    store = open_block_store(f"s3://{bucket}/listed", s3.options)
    assert isinstance(store, FsspecBlockStore)
    store.write(kafka_block("input-0-r-1-10", 2))
    store.write(kafka_block("input-0-q-1-10", 2))
    assert [b.block_id for b in store.stored_blocks(0, "input-0-r-")] == ["input-0-r-1-10"]
    # written by another process (the driver, an earlier run): s3fs's cached listing would miss it
    s3.client().put_object(Bucket=bucket, Key="listed/stream-0/input-0-r-1-20.blk", Body=b"another writer")
    listed = store.stored_blocks(0, "input-0-r-")
    assert sorted(b.block_id for b in listed) == ["input-0-r-1-10", "input-0-r-1-20"]
    assert all(abs(b.modified - time.time()) < 120 for b in listed)


@pytest.mark.slow
def test_s3_missing_object_and_corrupt_object(s3: MotoServer) -> None:
    bucket = s3.bucket()
    store = open_block_store(f"s3://{bucket}/bad", s3.options)
    assert isinstance(store, FsspecBlockStore)
    with pytest.raises(BlockMissingError, match=f"no object at s3://{bucket}/bad/stream-0/nope.blk"):
        store.read(store.location_of(0, "nope"))
    location = store.write(kafka_block())
    s3.client().put_object(Bucket=bucket, Key="bad/stream-0/input-0-r1-1000.blk", Body=b"SLUICEBK-truncated")
    with pytest.raises(BlockCorruptError, match=f"at {location} is corrupt"):
        store.read(location)


@pytest.mark.slow
def test_s3_unreachable_endpoint_is_retried_then_names_url_and_cause(monkeypatch) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own retries off: ours are under test
    dead = f"http://127.0.0.1:{free_port()}"
    store = FsspecBlockStore(
        "s3://bucket/blocks",
        {"endpoint_url": dead, "key": "k", "secret": "s", "client_kwargs": {"region_name": "us-east-1"}},
        attempts=2,
        backoff_s=0.05,
    )
    with pytest.raises(BlockStoreError) as info:
        store.write(kafka_block())
    message = str(info.value)
    assert message.startswith(
        "writing block input-0-r1-1000 to s3://bucket/blocks/stream-0/input-0-r1-1000.blk "
        "failed after 2 attempts: EndpointConnectionError"
    )
    assert dead in message


@pytest.mark.slow
def test_a_failed_delete_is_logged_naming_the_store_and_the_driver_goes_on(monkeypatch, caplog) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    dead = f"http://127.0.0.1:{free_port()}"
    source = ReceiverSource(
        "127.0.0.1:1",
        block_store_options={
            "endpoint_url": dead,
            "key": "k",
            "secret": "s",
            "client_kwargs": {"region_name": "us-east-1"},
        },
    )
    blocks = [ReceivedBlockInfo(0, f"b{i}", "r", 1, f"s3://bucket/blocks/stream-0/b{i}.blk") for i in range(3)]
    assert source._delete_blocks(blocks) is False  # no exception: the blocks are left, to be tried again
    assert (
        "3 block(s) could not be deleted from s3://bucket/blocks: deleting 3 block(s) from s3://bucket/blocks "
        "failed after 3 attempts: EndpointConnectionError" in caplog.text
    )


def test_stored_bytes_per_record_are_its_key_and_value_plus_at_most_25() -> None:
    for key, partitions in ((None, 1), (b"k" * 16, 4)):
        records = [Record(key, b"x" * 200, "topic", i % partitions, i, 1_700_000_000_000 + i) for i in range(10_000)]
        payload = 200 + (len(key) if key else 0)
        assert len(block_format.encode(0, "b", records, ())) / len(records) <= payload + 25
