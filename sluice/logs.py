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


def setup_logging(level: str, stream: TextIO | None = None) -> None:
    """Log Sluice's lines of ``level`` and above to ``stream`` (stderr), replacing any earlier setup.

    Only the ``sluice`` tree takes ``level``; everything else (aiokafka's connection chatter, py4j,
    which logs its retried sends at INFO on the root logger) logs WARNING and above, unless DEBUG
    is asked for.
    """
    number = logging.getLevelName(level.upper())
    others = number if number == logging.DEBUG else max(number, logging.WARNING)
    logging.basicConfig(level=others, format=FORMAT, stream=stream or sys.stderr, force=True)
    logging.getLogger("sluice").setLevel(number)
