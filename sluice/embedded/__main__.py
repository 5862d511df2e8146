"""``python -m sluice.embedded --fetch``: fetch Apache Kafka's pinned jars (see :func:`sluice.embedded.kafka.main`)."""

import sys

from sluice.embedded.kafka import main

sys.exit(main())
