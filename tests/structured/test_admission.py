"""The pure parts of Structured Streaming admission: progress to BatchInfo, estimators, bounds,
the Kafka split, the rate file and the options.  No Spark, no sockets."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sluice.spark_driver.structured.admission import AdmissionControl, Progress, RateFile, progress_of, read_rate
from sluice.spark_driver.structured.kafka import batch_until, from_json, to_json
from sluice.spark_driver.structured.kafka_options import kafka_options
from sluice.spark_driver.structured.limits import NO_FIXED_BOUND, batch_records, default_max_rows
from sluice.spark_driver.structured.options import Admission, OptionError, admission_settings, sluice_options


def progress(batch_id: int, start_ms: int, duration_ms: int, rows: int) -> dict:
    """A ``StreamingQueryProgress`` map as ``json.loads(progress.json)`` gives it (the fields used)."""
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(start_ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {
        "id": "q",
        "name": "q",
        "batchId": batch_id,
        "timestamp": stamp,
        "batchDuration": duration_ms,
        "numInputRows": rows,
    }


def test_progress_maps_to_spark_timings() -> None:
    p = progress_of(progress(3, 1_700_000_001_250, 400, 77))
    assert p == Progress(3, 1_700_000_001_250, 400, 77)
    assert progress_of({"batchId": 1}) is None
    assert progress_of({**progress(1, 0, 1, 1), "timestamp": "yesterday"}) is None


def test_a_batch_that_starts_after_its_trigger_boundary_waited_that_long() -> None:
    control = AdmissionControl(lambda rate: None, trigger_interval_ms=1000)
    first = control.batch_info(Progress(0, 10_000, 2_500, 100))
    assert (first.scheduling_delay_ms, first.processing_delay_ms) == (0, 2_500)
    control.on_progress(Progress(0, 10_000, 2_500, 100))
    late = control.batch_info(Progress(1, 12_500, 300, 100))  # due at 11,000 (ProcessingTimeExecutor)
    assert (late.scheduling_delay_ms, late.processing_delay_ms, late.processing_end_ms) == (1_500, 300, 12_800)


def test_progress_feeds_the_pid_estimator_and_publishes_its_rate() -> None:
    published: list[float] = []
    control = AdmissionControl(published.append, trigger_interval_ms=1000, estimator="pid")
    assert control.on_progress(Progress(0, 0, 500, 5_000)) is None  # the PID's first call only records
    rate = control.on_progress(Progress(1, 1_000, 1_000, 1_000))  # capacity fell to 1,000 rows/s
    assert rate == pytest.approx(1_000) and published == [rate]
    assert control.on_progress(Progress(1, 1_000, 1_000, 1_000)) is None  # the same batch again: ignored
    assert published == [rate]


def test_the_adaptive_estimator_runs_on_progress_too() -> None:
    published: list[float] = []
    control = AdmissionControl(published.append, trigger_interval_ms=1000, estimator="adaptive")
    for i in range(8):
        control.on_progress(Progress(i, i * 1000, 800, 2_000))
    assert published and control.controller.failures == {}


def test_any_registered_estimator_works_through_the_same_controller() -> None:
    published: list[float] = []
    control = AdmissionControl(
        published.append, trigger_interval_ms=500, estimator="constant", estimator_options={"rate": 123.0}
    )
    control.on_progress(Progress(0, 0, 100, 10))
    assert published == [123.0]
    with pytest.raises(Exception, match="nosuch"):
        AdmissionControl(published.append, trigger_interval_ms=500, estimator="nosuch")


def test_batch_bounds_combine_the_fixed_limit_and_the_rate() -> None:
    fixed = Admission(max_offsets_per_trigger=1000, admission=True, trigger_interval_ms=1000)
    assert default_max_rows(fixed) == 1000
    assert batch_records(fixed, 1000, None) == 1000
    assert batch_records(fixed, 1000, 300.0) == 330  # rate x interval + 10 % headroom, below the cap
    assert batch_records(fixed, 1000, 5000.0) == 1000
    assert batch_records(fixed, None, 300.0) is None  # ReadAllAvailable (Trigger.Once) wins
    assert batch_records(fixed, 1000, None, streams=3) == 333
    free = Admission(max_offsets_per_trigger=None, admission=True, trigger_interval_ms=2000)
    assert default_max_rows(free) == NO_FIXED_BOUND
    assert batch_records(free, NO_FIXED_BOUND, None) is None
    assert batch_records(free, NO_FIXED_BOUND, 100.0) == 220
    off = Admission(max_offsets_per_trigger=None, admission=False, trigger_interval_ms=1000)
    assert default_max_rows(off) is None and batch_records(off, NO_FIXED_BOUND, 100.0) is None


def kafka(**options: str):
    return kafka_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t", **options})


def test_the_kafka_split_is_lag_weighted_with_per_partition_rates() -> None:
    current = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 900, ("t", 1): 100}
    assert batch_until(current, latest, 100, kafka()) == {("t", 0): 90, ("t", 1): 10}
    capped = kafka(maxRatePerPartition="50")
    assert batch_until(current, latest, 100, capped) == {("t", 0): 50, ("t", 1): 10}
    # the minimum-rate fix: the floor is min rate x the trigger's seconds, not the bare rate
    slow = kafka(minRatePerPartition="4", triggerIntervalMs="2500")
    assert batch_until(current, latest, 20, slow) == {("t", 0): 18, ("t", 1): 10}
    assert batch_until(current, latest, None, kafka()) == latest


def test_kafka_offsets_are_sparks_json() -> None:
    offsets = {("a", 1): 5, ("a", 0): 7, ("b", 0): 0}
    assert to_json(offsets) == {"a": {"0": 7, "1": 5}, "b": {"0": 0}}
    assert from_json(to_json(offsets)) == offsets
    with pytest.raises(ValueError, match="not a Kafka source offset"):
        from_json({"a": 3})


def test_rate_file_round_trip_and_a_bad_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "rate.json"
    assert read_rate(str(path)) is None
    RateFile(str(path)).publish(250.5)
    assert read_rate(str(path)) == 250.5
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert read_rate(str(path)) is None
    assert "rate file" in caplog.text and str(path) in caplog.text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option tracker is missing"),
        ({"tracker": "nohost"}, "option tracker = 'nohost' is not allowed"),
        ({"tracker": "h:1", "streams": "0,x"}, "option streams = '0,x' is not allowed"),
        ({"tracker": "h:1", "records": "avro"}, "option records = 'avro' is not allowed"),
        ({"tracker": "h:1", "maxOffsetsPerTrigger": "0"}, "option maxOffsetsPerTrigger = '0' is not allowed"),
        ({"tracker": "h:1", "admission": "yes"}, "option admission = 'yes' is not allowed"),
        ({"tracker": "h:1", "blockStoreOptions": "[1]"}, "option blockStoreOptions must be a JSON object"),
    ],
)
def test_bad_sluice_options_name_the_option(options: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(")):
        sluice_options(options)


def test_sluice_options_defaults_and_case(tmp_path: Path) -> None:
    ca = str(tmp_path / "ca.pem")  # under the temporary directory the suite's file allow-list names
    parsed = sluice_options({"TRACKER": "127.0.0.1:7100", "Streams": "2,0,2", "tlsCaFile": ca})
    assert parsed.streams == (2, 0) and parsed.records == "kafka" and parsed.tls
    assert admission_settings({"triggerIntervalMs": "250"}).trigger_interval_ms == 250


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t"}, "option kafka.bootstrap.servers is missing"),
        ({"kafka.bootstrap.servers": "b:1"}, "option subscribe is missing"),
        ({"kafka.bootstrap.servers": "b:1", "subscribe": "t", "assign": "{}"}, "give exactly one of subscribe"),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingOffsets": "newest"},
            "option startingOffsets = 'newest' is not allowed",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'},
            "t/0 = -3 is not allowed",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "startingOffsets": '{"u": {"0": 1}}'},
            "give offsets for every subscribed topic",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "failOnDataLoss": "maybe"},
            "option failOnDataLoss = 'maybe' is not allowed",
        ),
        (
            {"kafka.bootstrap.servers": "b:1", "subscribe": "t", "minRatePerPartition": "-1"},
            "option minRatePerPartition = '-1' is not allowed",
        ),
    ],
)
def test_bad_kafka_options_name_the_option(options: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        kafka_options(options)


def test_kafka_starting_offsets_json() -> None:
    parsed = kafka(startingOffsets='{"t": {"0": 23, "1": -2}}')
    assert parsed.starting.offsets == {("t", 0): 23, ("t", 1): -2}
    assert kafka().starting.offsets == "latest" and kafka().fail_on_data_loss
    assert kafka(kafkaClientOptions='{"security_protocol": "SSL"}').client_options == {"security_protocol": "SSL"}


def test_admit_stays_the_function_once_the_admission_module_is_loaded() -> None:
    import sluice.spark_driver.structured.admission  # noqa: F401 - sets the package attribute "admission"
    from sluice.spark_driver.structured import admit

    assert callable(admit) and admit.__module__ == "sluice.spark_driver.structured"
