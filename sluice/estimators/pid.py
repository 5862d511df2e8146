"""Spark's ``PIDRateEstimator``, transliterated so that it gives the same doubles .

Bit-for-bit agreement with Spark matters because users tune ``estimator.pid.*`` from Spark
experience, and because the project's own estimators are judged against this one: a baseline
that is "almost Spark" would make every comparison suspect.  So every step keeps Spark's
operand order and its long-to-double conversions (``float(...)`` before each division, as
``.toDouble`` does), and ``max`` follows ``java.lang.Math.max`` (NaN wins).  The tests call Spark's own
``PIDRateEstimator`` (the jar in the pyspark wheel, through py4j) over random sequences and
require the very same doubles.

Where this departs from Spark (arguments only, never the arithmetic): a non-finite or
non-numeric argument is refused (Spark only checks the sign, so it accepts an infinite gain
that turns every estimate into NaN), and errors are ``ValueError`` naming the argument.
"""

from __future__ import annotations

import math
import threading
from numbers import Real
from typing import NamedTuple

from sluice.config import PID_DEFAULTS
from sluice.errors import InvalidArgument

__all__ = ["PIDRateEstimator", "PIDTerms"]


class PIDTerms(NamedTuple):
    """The terms of the latest estimate, for the ``sluice_pid_*`` gauges (records/s, or /s²).

    A NamedTuple (not a dataclass) because one is built per estimate and it is the cheapest.
    """

    processing_rate: float
    error: float
    historical_error: float
    d_error: float
    rate: float


def _check(name: str, value: object, *, positive: bool) -> float:
    """Return ``value`` as a float, or raise ``ValueError`` naming ``name`` and what is allowed."""
    allowed = "a finite number > 0" if positive else "a finite number >= 0"
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidArgument(f"PIDRateEstimator: {name} must be {allowed}, got {value!r}")
    number = float(value)
    ok = number > 0 if positive else number >= 0
    if not ok or not math.isfinite(number):
        raise InvalidArgument(f"PIDRateEstimator: {name} must be {allowed}, got {value!r}")
    return number


class PIDRateEstimator:
    """Proportional-integral-derivative rate estimator; Spark's defaults (:data:`sluice.config.PID_DEFAULTS`).

    The "integral" term is not a sum of past errors: it is the scheduling delay turned into a
    rate (``scheduling_delay * processing_rate / batch_interval``), i.e. the records that piled
    up because earlier batches were too big.  ``compute`` is serialised by a lock, as Spark's
    body is ``this.synchronized``, because controllers may be fed from several job threads.
    """

    def __init__(
        self,
        batch_interval_ms: float,
        proportional: float = PID_DEFAULTS["proportional"],
        integral: float = PID_DEFAULTS["integral"],
        derivative: float = PID_DEFAULTS["derived"],
        min_rate: float = PID_DEFAULTS["min_rate"],
    ) -> None:
        self.batch_interval_ms = _check("batch_interval_ms", batch_interval_ms, positive=True)
        self.proportional = _check("proportional", proportional, positive=False)
        self.integral = _check("integral", integral, positive=False)
        self.derivative = _check("derivative", derivative, positive=False)
        self.min_rate = _check("min_rate", min_rate, positive=True)
        # Spark's initial state; the -1s only feed the first call, whose result is discarded.
        self._first_run = True
        self._latest_time: int | float = -1
        self._latest_rate = -1.0
        self._latest_error = -1.0
        self._last_terms: PIDTerms | None = None
        self._lock = threading.Lock()

    def compute(self, time_ms: int, elements: int, processing_delay_ms: int, scheduling_delay_ms: int) -> float | None:
        """Spark's ``compute``: a new rate, or ``None`` (guard failed, or the very first batch).

        The guard (time after the last update, some elements, some processing delay) leaves all
        state untouched.  The first call that passes it only records the processing rate as
        the reference: there is no previous estimate to measure an error against.
        """
        with self._lock:
            if not (time_ms > self._latest_time and elements > 0 and processing_delay_ms > 0):
                return None
            delay_since_update = float(time_ms - self._latest_time) / 1000  # seconds
            processing_rate = float(elements) / float(processing_delay_ms) * 1000
            error = self._latest_rate - processing_rate
            historical_error = float(scheduling_delay_ms) * processing_rate / self.batch_interval_ms
            d_error = (error - self._latest_error) / delay_since_update
            raw = (
                self._latest_rate
                - self.proportional * error
                - self.integral * historical_error
                - self.derivative * d_error
            )
            # java.lang.Math.max: NaN propagates (Python's max() would depend on argument order).
            new_rate = raw if (raw != raw or raw > self.min_rate) else self.min_rate
            self._latest_time = time_ms
            if self._first_run:
                self._latest_rate = processing_rate
                self._latest_error = 0.0
                self._first_run = False
                return None
            self._latest_rate = new_rate
            self._latest_error = error
            self._last_terms = PIDTerms(processing_rate, error, historical_error, d_error, new_rate)
            return new_rate

    @property
    def last_terms(self) -> PIDTerms | None:
        """The terms behind the latest returned rate; ``None`` until a rate has been returned."""
        return self._last_terms

    @property
    def latest_rate(self) -> float | None:
        """The reference rate for the next error (Spark's ``latestRate``); ``None`` before any."""
        return None if self._first_run else self._latest_rate

    @property
    def latest_time(self) -> int | float | None:
        """Time of the last update that passed the guard; ``None`` before any."""
        return None if self._first_run else self._latest_time

    def __repr__(self) -> str:
        return (
            f"PIDRateEstimator(batch_interval_ms={self.batch_interval_ms:g}, "
            f"proportional={self.proportional:g}, integral={self.integral:g}, "
            f"derivative={self.derivative:g}, min_rate={self.min_rate:g})"
        )
