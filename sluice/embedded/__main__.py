"""``python -m sluice.embedded --fetch``: fetch Apache Kafka's pinned jars (see :func:`sluice.embedded.kafka.main`)."""

import sys

from sluice.embedded.kafka import main

if __name__ == "__main__":  # walking the package for its API imports this module too
    sys.exit(main())
