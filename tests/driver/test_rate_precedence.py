"""Which rate the driver starts from: the one the tracker remembers, or ``initial_rate`` — stated in
the log with the setting that makes the other one win (``backpressure.resume_rate``)."""

from __future__ import annotations

import logging

import pytest

from sluice.config import resolve
from sluice.spark_driver.rate_loop import RateLoop
from tests.driver.fakes import MemorySource


def _loop(source: MemorySource, resume: bool) -> RateLoop:
    return RateLoop(
        source,
        (0,),
        batch_interval_ms=100,
        estimator="constant",
        estimator_options={"rate": 1.0},
        initial_rate=1000.0,
        resume=resume,
        slow_start=False,  # the precedence of the two rates, without the probe (tests/estimators/test_slow_start.py)
    )


def test_a_remembered_rate_wins_and_the_log_names_the_setting_that_turns_it_around(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = MemorySource(last_rate=10230.8)
    loop = _loop(source, resume=True)
    with caplog.at_level(logging.INFO, logger="sluice.spark_driver.rate_loop"):
        loop.start()
    assert loop.current_rate() == 10230.8 and source.published == []
    assert caplog.messages == [
        "stream 0: resuming from the last published rate 10230.8 records/s, not the initial rate 1000; "
        "set backpressure.resume_rate = false (--resume-rate false) to start from the initial rate"
    ]


def test_resume_rate_false_makes_the_initial_rate_win(caplog: pytest.LogCaptureFixture) -> None:
    source = MemorySource(last_rate=10230.8)
    loop = _loop(source, resume=False)
    with caplog.at_level(logging.INFO, logger="sluice.spark_driver.rate_loop"):
        loop.start()
    assert loop.current_rate() == 1000.0 and source.published == [(0, 1000.0)]
    assert caplog.messages[0] == (
        "stream 0: starting from the initial rate 1000 records/s, not the last published rate 10230.8 "
        "(backpressure.resume_rate is false)"
    )


def test_without_a_remembered_rate_the_initial_rate_is_published_quietly(caplog: pytest.LogCaptureFixture) -> None:
    source = MemorySource()
    with caplog.at_level(logging.INFO, logger="sluice.spark_driver.rate_loop"):
        _loop(source, resume=True).start()
    assert source.published == [(0, 1000.0)] and caplog.messages == []


def test_resume_rate_is_a_setting_of_every_spelling() -> None:
    assert resolve(["backpressure"], environ={})["backpressure.resume_rate"] is True
    env = {"SLUICE_BACKPRESSURE_RESUME_RATE": "false"}
    assert resolve(["backpressure"], environ=env)["backpressure.resume_rate"] is False
    flags = {"backpressure.resume_rate": "true"}
    assert resolve(["backpressure"], flags=flags, environ=env)["backpressure.resume_rate"] is True
