"""Block format and file block store: round trips, durability steps, errors naming block and place."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sluice.block_info import OffsetRange
from sluice.records import Record
from sluice.storage.block_store import (
    Block,
    BlockCorruptError,
    BlockMissingError,
    BlockStoreError,
    FileBlockStore,
    open_block_store,
    read_block,
)


def kafka_block() -> Block:
    records = [
        Record(None if i % 2 else b"k%d" % i, b"v%d" % i, "topic", 3, 100 + i, 1_700_000_000_000 + i) for i in range(50)
    ]
    return Block(0, "input-0-r1-1000", records, (OffsetRange("topic", 3, 100, 150),))


def test_kafka_block_round_trip_returns_records(tmp_path: Path):
    store = open_block_store(tmp_path.as_uri())
    block = kafka_block()
    location = store.write(block)
    assert location.startswith("file:///") and location.endswith("input-0-r1-1000.blk")
    back = store.read(location)
    assert back == block
    assert all(type(r) is Record for r in back.records)
    assert back.records[1].key is None and back.records[2].offset == 102


def test_plain_values_round_trip(tmp_path: Path):
    store = FileBlockStore(tmp_path)
    values = ["hello world", b"\x00\x01", 42, 3.5, None, ["word", 1], {"a": 1}]
    location = store.write(Block(7, "input-7-x-0", values))
    back = store.read(location)
    assert back.stream_id == 7 and back.records == values and back.offset_ranges == ()


def test_relative_url_is_made_absolute(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = open_block_store("file://./blocks")
    assert store.url == (tmp_path / "blocks").as_uri()
    location = store.write(Block(1, "b1", [1]))
    monkeypatch.chdir("/")
    assert open_block_store(store.url).read(location).records == [1]


def test_write_leaves_no_temp_file_and_uses_stream_directories(tmp_path: Path):
    store = FileBlockStore(tmp_path)
    store.write(Block(2, "b1", ["x"]))
    assert sorted(os.listdir(tmp_path / "stream-2")) == ["b1.blk"]


def test_missing_block_names_block_and_location(tmp_path: Path):
    store = FileBlockStore(tmp_path)
    location = store.location_of(0, "input-0-r-5")
    with pytest.raises(BlockMissingError, match=r"block input-0-r-5 is missing.*" + location):
        store.read(location)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[:-3], "truncated|size"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), "CRC32 mismatch"),
        (lambda b: b"NOTABLOCK" + b[9:], "not a Sluice block"),
        (lambda b: b[:8] + b"\x00\x09" + b[10:], "format version 9"),
        (lambda b: b"", "truncated"),
    ],
)
def test_corrupt_block_names_block_location_and_cause(tmp_path: Path, damage, message):
    store = FileBlockStore(tmp_path)
    location = store.write(kafka_block())
    path = tmp_path / "stream-0" / "input-0-r1-1000.blk"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(BlockCorruptError, match=message) as info:
        store.read(location)
    assert "input-0-r1-1000" in str(info.value) and location in str(info.value)


def test_misplaced_block_is_detected(tmp_path: Path):
    store = FileBlockStore(tmp_path)
    location = store.write(kafka_block())
    other = tmp_path / "stream-0" / "other.blk"
    os.rename(tmp_path / "stream-0" / "input-0-r1-1000.blk", other)
    with pytest.raises(BlockCorruptError, match="header names block"):
        store.read(other.as_uri())
    assert location != other.as_uri()


def test_delete_is_idempotent(tmp_path: Path):
    store = FileBlockStore(tmp_path)
    location = store.write(Block(0, "b", [1]))
    store.delete(location)
    store.delete(location)
    with pytest.raises(BlockMissingError):
        store.read(location)


def test_bad_urls_and_ids_are_refused_clearly(tmp_path: Path):
    with pytest.raises(
        BlockStoreError,
        match=r"block store URL 'ftp://host/blocks': unknown block store 'ftp'; "
        r"available: .*\bfile\b.*\bs3\b",
    ):
        open_block_store("ftp://host/blocks")
    with pytest.raises(
        BlockStoreError, match=r"block location 'file:///blocks/b.blk' is refused: it is not <store URL>/stream-"
    ):
        read_block("file:///blocks/b.blk")
    store = FileBlockStore(tmp_path)
    with pytest.raises(BlockStoreError, match="block id '../escape' is not allowed"):
        store.write(Block(0, "../escape", [1]))
    with pytest.raises(BlockStoreError, match="block b2 .*cannot be stored as msgpack.*record 1: object"):
        store.write(Block(0, "b2", [1, object()]))


def test_unwritable_directory_names_block_and_location(tmp_path: Path):
    if os.geteuid() == 0:
        target = tmp_path / "file-not-dir"
        target.write_text("x")
        store = FileBlockStore(target)
    else:
        os.chmod(tmp_path, 0o500)
        store = FileBlockStore(tmp_path / "sub")
    with pytest.raises(BlockStoreError, match="block b3 could not be written to file://"):
        store.write(Block(0, "b3", [1]))


def test_block_is_readable_in_a_fresh_interpreter(tmp_path: Path):
    """Spark tasks read blocks in a worker process that imported nothing but the store."""
    import subprocess
    import sys

    location = FileBlockStore(tmp_path).write(kafka_block())
    code = (
        "import sys; from sluice.storage import open_block_store; "
        "b = open_block_store(sys.argv[1]).read(sys.argv[2]); "
        "assert 'aiokafka' not in sys.modules; print(len(b.records), b.records[0].topic)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, FileBlockStore(tmp_path).url, location], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["50", "topic"]


def test_consumer_records_are_stored_column_wise_and_read_back_as_records(tmp_path: Path):
    from aiokafka.structs import ConsumerRecord

    raw = [
        ConsumerRecord(
            "t",
            p,
            10 + i,
            1_700_000_000_000 + i,
            0,
            None if i % 3 else b"key%d" % i,
            None if i == 4 else b"value %d" % i,
            None,
            3,
            9,
            (),
        )
        for i, p in enumerate([0, 0, 0, 1, 1, 0, 2])
    ]
    store = FileBlockStore(tmp_path)
    location = store.write(Block(0, "cr", raw))
    back = store.read(location).records
    assert all(type(r) is Record for r in back)
    assert back == [Record(r.key, r.value, r.topic, r.partition, r.offset, r.timestamp) for r in raw]


def test_kafka_block_without_keys_and_with_several_topics(tmp_path: Path):
    records = [Record(None, b"v", "a" if i < 3 else "b", i % 2, i, i) for i in range(6)]
    store = FileBlockStore(tmp_path)
    assert store.read(store.write(Block(0, "k", records))).records == records


def _encode_v1(stream_id: int, block_id: str, records: list[Record], ranges: tuple[OffsetRange, ...]) -> bytes:
    """A Kafka block exactly as format version 1 wrote it (int32 lengths + concatenated bytes)."""
    import struct
    import zlib
    from array import array

    import msgpack

    def ints(code: str, values) -> bytes:
        column = array(code, values)
        if sys.byteorder != "little":
            column.byteswap()
        return column.tobytes()

    def lengths(items: list) -> tuple[bytes, bytes]:
        return (ints("i", [-1 if v is None else len(v) for v in items]), b"".join(v for v in items if v is not None))

    names: dict[str, int] = {}
    index = [names.setdefault(r.topic, len(names)) for r in records]
    has_keys = any(r.key is not None for r in records)
    value_lengths, value_bytes = lengths([r.value for r in records])
    key_lengths, key_bytes = lengths([r.key for r in records]) if has_keys else (b"", b"")
    sections = [
        ints("q", [r.offset for r in records]),
        ints("q", [r.timestamp_ms for r in records]),
        ints("i", [r.partition for r in records]),
        ints("i", index) if len(names) > 1 else b"",
        value_lengths,
        key_lengths,
        value_bytes,
        key_bytes,
    ]
    header = msgpack.packb(
        {
            "stream_id": stream_id,
            "block_id": block_id,
            "num_records": len(records),
            "offset_ranges": [r.to_wire() for r in ranges],
            "kind": "kafka",
            "columns": {"topics": list(names), "has_keys": has_keys, "sections": [len(s) for s in sections]},
        },
        use_bin_type=True,
    )
    payload = b"".join(sections)
    crc = zlib.crc32(payload, zlib.crc32(header))
    return struct.pack(">8sHIQI", b"SLUICEBK", 1, len(header), len(payload), crc) + header + payload


@pytest.mark.parametrize(
    "records",
    [
        kafka_block().records,
        [Record(None, b"v%d" % i, "a" if i < 3 else "b", i % 2, i, i) for i in range(6)],
        [Record(b"k", None, "t", 0, 7, 1)],
    ],
)
def test_format_version_1_blocks_still_read_the_same(tmp_path: Path, records: list[Record]):
    """Blocks written before format version 2 (columnar msgpack values) read back unchanged."""
    store = FileBlockStore(tmp_path)
    ranges = (OffsetRange("topic", 3, 100, 150),)
    location = store.location_of(0, "old")
    (tmp_path / "stream-0").mkdir(exist_ok=True)
    (tmp_path / "stream-0" / "old.blk").write_bytes(_encode_v1(0, "old", records, ranges))
    back = store.read(location)
    assert back.records == records and all(type(r) is Record for r in back.records)
    assert back.offset_ranges == ranges
    assert store.read(store.write(Block(0, "new", records, ranges))).records == records


def test_single_partition_block_round_trips():
    from sluice.storage import block_format

    records = [Record(b"k%d" % i, b"v" * i, "t", 5, 40 + i, 1_700_000_000_000 + i) for i in range(20)]
    header, back = block_format.decode(block_format.encode(0, "p", records, ()))
    assert back == records and header["columns"]["partition"] == 5 and header["columns"]["sections"][2] == 0


def test_relative_store_urls_and_paths_become_absolute_locations(tmp_path: Path, monkeypatch) -> None:
    from sluice.storage.block_store import file_store_url, read_block

    monkeypatch.chdir(tmp_path)
    urls = ["file://./blocks", "file://blocks", file_store_url("blocks")]
    assert [open_block_store(url).url for url in urls] == [(tmp_path / "blocks").as_uri()] * 3
    location = open_block_store("file://blocks").write(Block(0, "b-1", ["x"]))
    assert location == (tmp_path / "blocks" / "stream-0" / "b-1.blk").as_uri()
    monkeypatch.chdir("/")  # a reader elsewhere (a Spark task) finds it by its location alone
    assert read_block(location).records == ["x"]


def test_a_block_file_is_readable_by_other_users_and_no_temp_file_stays(tmp_path: Path):
    """Executors may read blocks as another user: the durable write creates files as ``open`` does."""
    old = os.umask(0o022)
    try:
        location = FileBlockStore(tmp_path).write(Block(3, "b1", [1, 2]))
    finally:
        os.umask(old)
    path = tmp_path / "stream-3" / "b1.blk"
    assert location == path.as_uri() and path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["b1.blk"]
