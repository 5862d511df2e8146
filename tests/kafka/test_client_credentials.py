"""Credentials in ``[kafka.client]`` from a file or an environment variable, and never shown.

The values reach aiokafka as its own keyword arguments (what a real login needs is shown by
tests/kafka/test_kafka_security.py); here, each form, the refusals, and the redacted view.
"""

from __future__ import annotations

import os

import pytest

from sluice.config_key import ConfigError
from sluice.kafka.client_settings import consumer_options
from sluice.redaction import redacted


def test_a_password_file_becomes_the_password_without_its_line_end(tmp_path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret-value\n")
    options = consumer_options({"sasl_plain_username": "alice", "sasl_plain_password_file": str(secret)})
    assert options == {"sasl_plain_username": "alice", "sasl_plain_password": "s3cret-value"}
    assert consumer_options(options) == options  # applying it twice changes nothing


def test_an_environment_variable_becomes_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_TEST_KAFKA_PASSWORD", "from-the-env")
    options = consumer_options({"sasl_plain_password_env": "SLUICE_TEST_KAFKA_PASSWORD"})
    assert options == {"sasl_plain_password": "from-the-env"}


def test_a_missing_variable_or_file_is_a_configuration_error_naming_it(tmp_path) -> None:
    os.environ.pop("SLUICE_TEST_UNSET", None)
    with pytest.raises(ConfigError, match="kafka.client.sasl_plain_password_env.*SLUICE_TEST_UNSET"):
        consumer_options({"sasl_plain_password_env": "SLUICE_TEST_UNSET"})
    with pytest.raises(ConfigError, match="kafka.client.ssl_password_file .*does not exist"):
        consumer_options({"ssl_password_file": str(tmp_path / "absent")})


def test_a_fifo_is_refused_rather_than_waited_on(tmp_path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is a FIFO"):
        consumer_options({"sasl_plain_password_file": str(fifo)})


def test_two_forms_of_one_credential_are_refused(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_TEST_KAFKA_PASSWORD", "x")
    with pytest.raises(ConfigError, match="sasl_plain_password and kafka.client.sasl_plain_password_env both set"):
        consumer_options({"sasl_plain_password": "inline", "sasl_plain_password_env": "SLUICE_TEST_KAFKA_PASSWORD"})


def test_redacted_hides_every_credential_and_keeps_the_rest() -> None:
    shown = redacted({"sasl_plain_username": "alice", "sasl_plain_password": "p1", "ssl_password": "p2"})
    assert shown == {"sasl_plain_username": "alice", "sasl_plain_password": "<redacted>", "ssl_password": "<redacted>"}
