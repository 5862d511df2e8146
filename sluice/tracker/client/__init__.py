"""The tracker's client, for receivers, the driver and ``sluice-admin``.

:class:`~.tracker_client.TrackerClient` (asyncio) and :class:`~.sync_client.SyncTrackerClient`
(blocking, for the PySpark driver), with the connection, its frames and the requests in flight.
It imports only :mod:`sluice.tracker.wire` of the tracker: a receiver or a driver loads no server
state, no write-ahead log and no Prometheus registry of the tracker's.
"""
