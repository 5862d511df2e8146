"""One logging setup for every Sluice service: the level comes from the ``log.level`` key.

Every logger of Sluice is ``sluice.<module>`` (``logging.getLogger(__name__)``), so one tree takes
one level.  The key is set like any other (``[log] level`` in the TOML file, ``SLUICE_LOG_LEVEL``,
``--log-level``); each console script calls :func:`setup_logging` once with the resolved value.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

__all__ = ["LEVELS", "FORMAT", "setup_logging"]

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries that are chatty at INFO (connection chatter per request): WARNING unless DEBUG is asked for.
QUIET_LIBRARIES = ("aiokafka", "kafka", "py4j")


def setup_logging(level: str, stream: TextIO | None = None) -> None:
    """Log lines of ``level`` and above to ``stream`` (stderr), replacing any earlier setup."""
    number = logging.getLevelName(level.upper())
    logging.basicConfig(level=number, format=FORMAT, stream=stream or sys.stderr, force=True)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(number if number == logging.DEBUG else max(number, logging.WARNING))
