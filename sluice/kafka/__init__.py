"""Sluice's Kafka floor: what the receiver, direct mode and the Structured Streaming source share.

Which partitions a reader takes (:mod:`.topics`), the pure offset maths and data loss
(:mod:`.offsets`, :mod:`.gaps`, :mod:`.time_search`), the driver's view of a topic's offsets and
the group's commits (:mod:`.offsets_client`), the receiver's own fetches of raw record batches
(:mod:`.fetcher`), record batches and their codecs (:mod:`.record_batches`, :mod:`.codecs`), and
the ``kafka.client`` settings as aiokafka takes them (:mod:`.client_settings`).  It imports none of
the services: each of them stands on it.
"""
