"""The pure Kafka maths every path shares: topic selection, start by time, range splitting, the
trigger floor, the lag metrics, and the ``sluice-kafka`` options that feed them.  No broker."""

from __future__ import annotations

import pytest

from sluice.block_info import OffsetRange
from sluice.errors import InvalidArgument
from sluice.kafka.offsets import batch_due, by_timestamp, offsets_behind, offsets_holding, split_ranges
from sluice.kafka.topics import TopicSelection, assign, subscribe, subscribe_pattern
from sluice.spark_driver.direct.sampling import Sample, bound_in_offsets
from sluice.spark_driver.structured.kafka_options import kafka_options
from sluice.spark_driver.structured.options import OptionError

CLUSTER = {"logs-a": [0, 1], "logs-b": [0], "xlogs-a": [0], "__consumer_offsets": [0]}


def test_selection_by_names_pattern_and_assignment() -> None:
    assert subscribe("logs-b, logs-a,missing").select(CLUSTER) == [("logs-a", 0), ("logs-a", 1), ("logs-b", 0)]
    assert subscribe("logs-a,missing").missing(CLUSTER) == ["missing"]
    # a pattern matches whole names (Java's matches()), never internal topics
    assert subscribe_pattern("logs-.*").select(CLUSTER) == [("logs-a", 0), ("logs-a", 1), ("logs-b", 0)]
    assert subscribe_pattern(".*").select({"__consumer_offsets": [0]}) == []
    assert assign('{"logs-a": [1], "gone": [0]}').select(CLUSTER) == [("gone", 0), ("logs-a", 1)]
    with pytest.raises(InvalidArgument, match="exactly one"):
        TopicSelection(topics=("a",), pattern="b")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribePattern": "("}, "option subscribePattern = '\\(' is not a regular expression"),
        ({"assign": "[0]"}, "option assign = '\\[0\\]' is not allowed: expected JSON such as"),
        ({"assign": '{"t": [-1]}'}, "must list partition numbers"),
        ({"subscribe": "t", "subscribePattern": "t.*"}, "give exactly one of subscribe, subscribePattern or assign"),
        ({"subscribe": "t", "startingTimestamp": "yesterday"}, "option startingTimestamp = 'yesterday' is not allowed"),
        ({"subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": -5}}'}, "t/0 = -5 is not allowed"),
        ({"subscribe": "t", "startingOffsetsByTimestampStrategy": "oldest"}, "expected one of error, latest"),
        ({"subscribe": "t", "endingOffsets": "latest"}, "option endingOffsets is for batch reads"),
        ({"subscribe": "t", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "must not exceed"),
        ({"subscribe": "t", "maxTriggerDelay": "soon"}, "option maxTriggerDelay = 'soon' is not allowed"),
        ({"subscribe": "t", "minPartitions": "0"}, "option minPartitions = '0' is not allowed"),
        ({"subscribe": "t", "maxRecordsPerPartition": "x"}, "option maxRecordsPerPartition = 'x' is not allowed"),
        ({"subscribe": "t", "includeHeaders": "yes"}, "option includeHeaders = 'yes' is not allowed"),
        ({"subscribe": "t", "commitOffsetsOnCheckpoint": "true"}, "needs kafka.group.id"),
        ({"subscribe": "t", "maxBytesPerTrigger": "lots"}, "option maxBytesPerTrigger = 'lots' is not allowed"),
        ({"subscribe": "t", "maxBytesPerTrigger": "0"}, "expected a size above 0 such as 1048576, 512k"),
        ({"subscribe": "t", "maxBytesPerTrigger": "5 parsecs"}, "option maxBytesPerTrigger = '5 parsecs'"),
        (
            {"subscribe": "t", "limitsCount": "bytes"},
            "option limitsCount = 'bytes' is not allowed: expected one of offsets",
        ),
        ({"subscribe": "t", "topicWeights": "[1]"}, "option topicWeights must be a JSON object"),
        ({"subscribe": "t", "topicWeights": '{"t": 0}'}, "the weight of topic 't' is 0: expected a number above 0"),
        ({"subscribe": "t", "topicWeights": '{"t": true}'}, "the weight of topic 't' is True"),
        ({"subscribe": "t", "topicWeights": '{"tt": 2}'}, "names topic 'tt', which t does not take"),
        ({"subscribePattern": "a.*", "topicWeights": '{"b": 2}'}, "names topic 'b', which topics matching"),
    ],
)
def test_bad_kafka_options_are_refused_by_name(options: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        kafka_options({"kafka.bootstrap.servers": "b:1", **options})


def test_batch_only_options_and_durations() -> None:
    parsed = kafka_options(
        {
            "kafka.bootstrap.servers": "b:1",
            "subscribe": "t",
            "endingOffsets": '{"t": {"0": 5}}',
            "maxTriggerDelay": "2s",
        },
        batch=True,
    )
    assert parsed.starting.offsets == "earliest" and parsed.ending.offsets == {("t", 0): 5}
    assert parsed.max_trigger_delay_ms == 2000
    with pytest.raises(OptionError, match="-2 \\(earliest\\) cannot end a read"):
        kafka_options(
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, batch=True
        )
    stamped = kafka_options(
        {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingTimestamp": "5", "startingOffsets": "earliest"}
    )
    assert stamped.starting.timestamp == 5  # Spark's precedence: the timestamp wins


def test_byte_sizes_and_counting_records_become_offset_bounds() -> None:
    def parsed(**options: str):
        return kafka_options({"kafka.bootstrap.servers": "b:1", "subscribe": "t", **options})

    sizes = [parsed(maxBytesPerTrigger=r).max_bytes_per_trigger for r in ("2048", "512k", "10 MB", "1g")]
    assert sizes == [2048, 512 << 10, 10 << 20, 1 << 30]
    assert not parsed().count_records and parsed(limitsCount="Records").count_records
    a, b = ("t", 0), ("t", 1)
    assert offsets_holding(10_000, {a: 1000.0}, {a: 50}) == 10
    assert offsets_holding(10_000, {a: 100.0, b: 1900.0}, {a: 50, b: 50}) == 10  # a mean of 1000 bytes
    assert offsets_holding(10_000, {a: 100.0, b: 1900.0}, {a: 90, b: 10}) == 35  # 280 bytes, lag-weighted
    assert offsets_holding(100, {a: 1e6}, {a: 5}) == 1  # a record over the bound goes alone
    assert offsets_holding(100, {}, {a: 0}) == 100
    gappy = Sample(offsets=20, records=5, size=500)  # a compacted stretch: one offset in four is a record
    assert offsets_holding(10, {a: gappy.records_per_offset}, {a: 1000}) == 40
    assert offsets_holding(10, {a: Sample(20, 0, 0).records_per_offset}, {a: 1000}) == 200  # all gaps: 1 per sample
    assert gappy.bytes_per_offset == 25.0
    found = {a: gappy, b: Sample(20, 20, 20_000)}  # b is dense, a thousand bytes a record
    lags = {a: 100, b: 100}
    assert bound_in_offsets(10, found, lags, count_records=False, max_bytes=None) == 10  # Spark's: offsets
    assert bound_in_offsets(10, found, lags, count_records=True, max_bytes=None) == 16  # 0.625 records an offset
    assert bound_in_offsets(None, found, lags, count_records=True, max_bytes=5125) == 10  # 512.5 bytes an offset
    assert bound_in_offsets(100, found, lags, count_records=False, max_bytes=5125) == 10  # the smaller bound
    assert bound_in_offsets(None, found, lags, count_records=True, max_bytes=None) is None


def test_by_timestamp_strategy() -> None:
    latest = {("t", 0): 10, ("t", 1): 4}
    assert by_timestamp({("t", 0): 3, ("t", 1): None}, latest, "latest", "x") == {("t", 0): 3, ("t", 1): 4}
    with pytest.raises(InvalidArgument, match="x: no record at or after the timestamp in t/1"):
        by_timestamp({("t", 0): 3, ("t", 1): None}, latest, "error", "x")


def test_split_ranges_cover_every_offset_once() -> None:
    hot, cold = OffsetRange("t", 0, 100, 140), OffsetRange("t", 1, 0, 1)
    parts = split_ranges([hot, cold], 5, None)
    assert [(r.partition, r.from_offset, r.until_offset) for r in parts] == [
        (0, 100, 110),
        (0, 110, 120),
        (0, 120, 130),
        (0, 130, 140),
        (1, 0, 1),
    ]
    capped = split_ranges([hot, cold], None, 15)
    assert [r.count for r in capped] == [13, 13, 14, 1]
    assert split_ranges([hot], 1, None) == [hot] and split_ranges([OffsetRange("t", 0, 5, 5)], 3, None) == []
    for ranges in (split_ranges([hot, cold], 7, 9), split_ranges([hot], 40, None)):
        assert sorted((r.partition, o) for r in ranges for o in range(r.from_offset, r.until_offset)) == sorted(
            [(0, o) for o in range(100, 140)] + ([(1, 0)] if len(ranges) != 40 else [])
        )


def test_trigger_floor_and_lag_metrics() -> None:
    assert not batch_due(0, None, 10**9, 0)
    assert batch_due(3, None, 0, 1000)
    assert not batch_due(3, 5, 999, 1000) and batch_due(3, 5, 1000, 1000) and batch_due(5, 5, 0, 1000)
    behind = offsets_behind({("t", 0): 15, ("t", 1): 5, ("u", 0): 1}, {("t", 0): 30, ("t", 1): 10})
    assert behind == {"minOffsetsBehindLatest": 5.0, "maxOffsetsBehindLatest": 15.0, "avgOffsetsBehindLatest": 10.0}
    assert offsets_behind({}, {("t", 0): 1}) == {}
