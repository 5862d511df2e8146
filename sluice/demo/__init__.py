"""``sluice-demo``: backpressure, seen working in a minute.

The demo starts every part of a Sluice pipeline on loopback (Apache Kafka's broker unless
``--bootstrap-servers`` names another, the tracker, two receiver workers, a PySpark word-count
driver) and a load generator that offers first less than the driver can process, then much more,
then less again. Backpressure shows as the rate limit following the processing capacity while the
excess waits in Kafka instead of in Spark's queue. Modules: ``profile`` (load shapes), ``load``
(the producer), ``app`` (the word count), ``processes`` (children and their clean-up), ``report``
(live table, summary, chart), ``cli`` (the orchestration).
"""
