"""Options are the query writer's, files and hosts the server's: file options lie in allowed
directories, the token goes only to allowed trackers, and odd values get the option's error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sluice.spark_driver.structured.kafka_options import kafka_options
from sluice.spark_driver.structured.options import OptionError, sluice_options

BASE = {"tracker": "127.0.0.1:7100"}
KAFKA = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


@pytest.fixture
def allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "allowed"
    directory.mkdir()
    monkeypatch.setenv("SLUICE_STRUCTURED_FILE_DIRS", str(directory))
    return directory


@pytest.mark.parametrize("option", ["authTokenFile", "tlsCaFile"])
def test_a_file_option_outside_the_allowed_directories_is_refused(option, allowed, tmp_path):
    with pytest.raises(OptionError, match=f"option {option} = .* is not allowed: files must lie in"):
        sluice_options({**BASE, option: "/etc/shadow"})
    (tmp_path / "link").symlink_to("/etc")
    with pytest.raises(OptionError, match="files must lie in"):
        sluice_options({**BASE, option: str(allowed / ".." / "link" / "passwd")})
    assert getattr(
        sluice_options({**BASE, option: str(allowed / "f")}),
        option.replace("File", "_file").replace("authToken", "auth_token").replace("tlsCa", "tls_ca"),
    ) == str(allowed / "f")


def test_rate_file_follows_the_allow_list_and_unset_allows_no_file(allowed, monkeypatch):
    with pytest.raises(OptionError, match="option rateFile"):
        kafka_options({**KAFKA, "rateFile": "/var/tmp/rate"})
    assert kafka_options({**KAFKA, "rateFile": str(allowed / "rate")}).rate_file == str(allowed / "rate")
    monkeypatch.delenv("SLUICE_STRUCTURED_FILE_DIRS")
    with pytest.raises(OptionError, match="unset: no file option is allowed"):
        kafka_options({**KAFKA, "rateFile": str(allowed / "rate")})


def test_bad_records_and_the_dead_letter_directory_are_checked(allowed):
    assert kafka_options(KAFKA).bad_records.policy == "fail"
    assert kafka_options({**KAFKA, "badRecords": "skip"}).bad_records.policy == "skip"
    with pytest.raises(OptionError, match="option badRecords = 'drop' is not allowed: expected one of fail, skip"):
        kafka_options({**KAFKA, "badRecords": "drop"})
    with pytest.raises(OptionError, match="option badRecords = dead-letter needs deadLetter"):
        kafka_options({**KAFKA, "badRecords": "dead-letter"})
    with pytest.raises(OptionError, match="option deadLetter is given but badRecords = fail"):
        kafka_options({**KAFKA, "deadLetter": str(allowed)})
    with pytest.raises(OptionError, match="option deadLetter = .* is not allowed: files must lie in"):
        kafka_options({**KAFKA, "badRecords": "dead-letter", "deadLetter": "/var/tmp/dead"})
    with pytest.raises(OptionError, match="option deadLetter = 's3://b/dead' is not allowed: expected a local"):
        kafka_options({**KAFKA, "badRecords": "dead-letter", "deadLetter": "s3://b/dead"})
    kept = kafka_options({**KAFKA, "badRecords": "dead-letter", "deadLetter": f"file://{allowed}/dead"}).bad_records
    assert (kept.policy, kept.dead_letter) == ("dead-letter", f"file://{allowed}/dead")


def test_the_token_goes_only_to_a_loopback_or_allowed_tracker(allowed, monkeypatch):
    token = str(allowed / "token")
    with pytest.raises(OptionError, match="the token goes only to a loopback tracker"):
        sluice_options({"tracker": "attacker.example:7100", "authTokenFile": token})
    monkeypatch.setenv("SLUICE_STRUCTURED_TRACKER_HOSTS", "tracker.internal")
    assert sluice_options({"tracker": "tracker.internal:7100", "authTokenFile": token}).auth_token_file == token
    assert sluice_options({"tracker": "attacker.example:7100"}).auth_token_file is None  # no token: nothing sent
    with pytest.raises(OptionError, match="the token goes only to a loopback tracker"):  # every tracker of a list
        sluice_options({"tracker": "tracker.internal:7100,attacker.example:7100", "authTokenFile": token})


@pytest.mark.parametrize("streams", ["²", "1,³", "٣"])
def test_non_ascii_digits_get_the_option_error(streams):
    with pytest.raises(OptionError, match="option streams"):
        sluice_options({**BASE, "streams": streams})
    with pytest.raises(OptionError, match="option startingOffsets"):
        kafka_options({**KAFKA, "startingOffsets": json.dumps({"t": {streams.split(",")[-1]: 1}})})


def test_an_option_a_source_does_not_read_is_refused_by_the_name_given():
    with pytest.raises(
        OptionError, match=r"option maxOfsetsPerTrigger is not a sluice source option: expected one of tracker, "
    ):
        sluice_options({**BASE, "maxOfsetsPerTrigger": "10"})
    with pytest.raises(OptionError, match="option kafka.isolation.level is not a sluice source option"):
        sluice_options({**BASE, "kafka.isolation.level": "read_committed"})
    with pytest.raises(
        OptionError, match=r"option startingOffset is not a sluice-kafka source option: .*, or kafka\.<a setting"
    ):
        kafka_options({**KAFKA, "startingOffset": "earliest"})


def test_kafka_settings_reach_the_sources_consumer_as_spark_hands_them_on():
    options = kafka_options(
        {
            **KAFKA,
            "kafka.isolation.level": "read_committed",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.group.id": "g",
        }
    )
    assert options.client_options == {"isolation_level": "read_committed", "security_protocol": "SASL_SSL"}
    assert options.group_id == "g"
    with pytest.raises(
        OptionError, match=r"option kafka.sasl.jaas.config is not a consumer setting: .*sasl\.mechanism"
    ):
        kafka_options({**KAFKA, "kafka.sasl.jaas.config": "x"})
    with pytest.raises(OptionError, match="option kafka.auto.offset.reset is not allowed: give startingOffsets"):
        kafka_options({**KAFKA, "kafka.auto.offset.reset": "earliest"})
