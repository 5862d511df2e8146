"""A tracker on a shared log (``tracker.wal_dir`` a URL): as leader it holds the lease; as standby
it follows the log into a warm service and takes over when the leader's lease lapses.

Every tracker of a log starts the same way, so one unit file serves them all: a log without a
lease is led at once (the lease created put-if-absent, so of several starting together one wins);
a lease that names this tracker's own address is a previous run of it (this process holds that
port now) and is taken at once; any other lease is followed as a standby until it lapses.  A
second tracker started on a live log therefore becomes a standby instead of deposing the leader.
``sluice-tracker --standby`` only asks never to lead before a lease lapses.

The standby serves its port from the start: every request but ``status`` gets ``not_leader``
naming the lease holder, so clients given a list of trackers find the leader.  On takeover it
takes the lease, reads what it has not yet read, fences the log (its first write), and from then
on logs and answers like any leader.  Store calls run in the default executor, off the event loop.

An object in the log's prefix the standby cannot apply is said once, by name (a line, the
``unreadable`` list of ``status`` and ``sluice_tracker_log_foreign_objects_total``): a ``_lease``
that is no lease record names no holder and lapses like a silent leader's; an object past the
log's end waits for the leader to write up to it; an object at the next number that does not
decode stops the standby (exit 1), as a supervisor restart is the one way on from there.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Coroutine

from prometheus_client import Counter, Gauge

from sluice.settings import TrackerSettings
from sluice.tracker.log.group_commit import GroupCommit
from sluice.tracker.log.lease import Lease, LeaseView, renewal_deadline_s, renewal_delay_s
from sluice.tracker.log.object_log import ObjectLog
from sluice.tracker.log.protocol import CatchUp, Deposed, Writer, catch_up, log_key
from sluice.tracker.log.store import ObjectStore, PreconditionFailed
from sluice.tracker.log.wal import WALCorruption
from sluice.tracker.server.metrics import REGISTRY
from sluice.tracker.server.received_block_tracker import ReceivedBlockTracker
from sluice.tracker.server.server import TrackerServer
from sluice.tracker.server.service import TrackerService
from sluice.tracker.wire.messages import Leadership

log = logging.getLogger(__name__)

LEADER = Gauge("sluice_tracker_leader", "1 while this tracker leads its log, 0 as a standby", registry=REGISTRY)
LEADER_SINCE = Gauge(
    "sluice_tracker_leader_since_seconds", "When the current leader took the lease (Unix time)", registry=REGISTRY
)
LOG_POSITION = Gauge(
    "sluice_tracker_log_position", "The number of the last log object this tracker wrote or read", registry=REGISTRY
)
FOREIGN_OBJECTS = Counter(
    "sluice_tracker_log_foreign_objects",
    "Objects in the shared log's prefix this tracker could not apply (each counted once)",
    registry=REGISTRY,
)
_UNREADABLE_KEPT = 20  # the most recent unreadable objects status names


class SharedLog:
    """Leadership of one tracker process over a shared log.

    :param store: where the log lives.
    :param service: the service the log's events go into.
    :param address: the HOST:PORT clients reach this process at (named to them by standbys).
    :param settings: ``lease_ms``, ``standby_poll_ms``, ``log_outage_ms`` and the log's roll and piece sizes.
    :param lease_store: the same store with requests bounded for the lease (``store`` when not given).
    """

    def __init__(
        self,
        store: ObjectStore,
        service: TrackerService,
        address: str,
        settings: TrackerSettings,
        lease_store: ObjectStore | None = None,
    ) -> None:
        self.store = store
        self.service = service
        self.settings = settings
        self.writer = Writer(uuid.uuid4().hex, address)
        self.lease = Lease(lease_store or store, self.writer, settings.lease_ms, on_foreign=self.foreign)
        self.unreadable: dict[str, str] = {}  # object -> why it cannot be applied, oldest first
        self.position = -1  # the last object read (as standby)
        self.log: ObjectLog | None = None
        self.leader: str | None = None
        self.leader_since_ms: int | None = None
        self._tasks: list[asyncio.Task] = []
        service.leadership = self.status

    def status(self) -> Leadership:
        position = self.log.position if self.log is not None else self.position
        LOG_POSITION.set(position)
        return {
            "role": "leader" if self.log is not None else "standby",
            "node": self.writer.address,
            "leader": self.writer.address if self.log is not None else self.leader,
            "leader_since_ms": self.leader_since_ms,
            "log_position": position,
            "unreadable": [f"{name}: {why}" for name, why in self.unreadable.items()],
        }

    def foreign(self, name: str, why: str) -> None:
        """An object this tracker cannot apply: said once per object (not per poll), and kept for status."""
        if name in self.unreadable:
            return
        log.error("shared log object %s cannot be applied, not written by a tracker of this log: %s", name, why)
        FOREIGN_OBJECTS.inc()
        self.unreadable[name] = why
        while len(self.unreadable) > _UNREADABLE_KEPT:
            del self.unreadable[next(iter(self.unreadable))]

    def run(self, server: TrackerServer, *, following: bool, eager: bool) -> None:
        """Start the leadership task: keep the lease, or follow (``eager``: see :meth:`follow`) and
        keep it once leading.  A leadership task that fails stops the tracker with its error."""
        loop = asyncio.get_running_loop()

        def done(task: asyncio.Task) -> None:
            if task.cancelled():
                return
            if (exc := task.exception()) is not None:
                log.error("the shared log's leadership failed: %r", exc)
                server.on_wal_failure(exc)
            elif task.get_name() == "tracker-follow" and server.failure is None:
                start(self.keep_lease(server), "tracker-lease")

        def start(role: Coroutine[object, object, None], name: str) -> None:
            task = loop.create_task(role, name=name)
            self._tasks.append(task)  # held: a task only the loop references may be collected
            task.add_done_callback(done)

        if following:
            start(self.follow(server, eager=eager), "tracker-follow")
        else:
            start(self.keep_lease(server), "tracker-lease")

    # --- leader ------------------------------------------------------------------------------

    def lead_if_free(self) -> GroupCommit | None:
        """Lead a log that has no lease yet (creating it put-if-absent), else ``None``: follow it.

        Blocking (run it in an executor)."""
        if self.lease.observe().exists:
            return None
        try:
            self.lease.take()
        except PreconditionFailed:
            return None  # another tracker starting beside this one created it first
        return self.open_leader()

    def open_leader(self, start: CatchUp | None = None) -> GroupCommit:
        """Read the log (after ``start``, what a standby already holds), fence it; the lease is
        taken already.  Blocking (run it in an executor)."""
        s = self.settings
        self.log = ObjectLog(
            self.store,
            self.writer,
            segment_bytes=s.wal_segment_bytes,
            segment_ms=s.wal_segment_ms,
            piece_bytes=s.wal_piece_bytes,
            outage_s=s.log_outage_ms / 1000,
        )
        try:
            recovered = self.log.recover(start)
        except BaseException:
            self.log = None
            raise
        self._load(recovered.snapshot, recovered.events)
        log.info(
            "leading the log from %s: %d events read after %s; %s",
            log_key(self.log.position),
            len(recovered.events),
            "a snapshot" if recovered.snapshot is not None else "what it held",
            self.service.tracker.describe(),
        )
        self.service.registry.refresh()  # the replayed receivers get a whole timeout to come back
        self.leader, self.leader_since_ms = self.writer.address, self.lease.since_ms
        LEADER.set(1)
        LEADER_SINCE.set((self.lease.since_ms or 0) / 1000)
        commit = GroupCommit(self.log, self.service.snapshot)
        self.service.set_log(commit)
        return commit

    async def keep_lease(self, server: TrackerServer) -> None:
        """Renew every third of the lease, soon again after a failure; a lease another took deposes
        this tracker at once.

        A renewal (every attempt until one succeeds) that has not succeeded within
        :func:`~sluice.tracker.log.lease.renewal_deadline_s` of its first attempt holds the
        server's replies: a standby may have taken the lease meanwhile, unheard.  The next renewal
        that succeeds proves it had not, and releases them."""
        loop = asyncio.get_running_loop()
        lease_ms = self.settings.lease_ms
        failed = False
        deadline: float | None = None  # of the renewal under way (by the lease's clock)
        late: asyncio.TimerHandle | None = None
        while server.failure is None:
            await asyncio.sleep(renewal_delay_s(lease_ms, failed))
            if deadline is None:
                deadline = self.lease.monotonic() + renewal_deadline_s(lease_ms)
                late = loop.call_later(renewal_deadline_s(lease_ms), self._late, server)
            try:
                # past its deadline the replies are held already: the attempts go on without one
                await loop.run_in_executor(None, self.lease.renew, None if server.replies_held else deadline)
            except Deposed as exc:
                log.error("%s", exc)
                LEADER.set(0)
                server.on_wal_failure(exc)
                return
            except Exception as exc:  # noqa: BLE001 - the store does not answer: the log's writes wait too
                failed = True
                log.warning("lease renewal failed (%s); retrying", exc)
                continue
            failed, deadline = False, None
            if late is not None:
                late.cancel()
            if server.replies_held:
                log.warning("lease renewed: this tracker still leads; sending the replies it held")
                server.release_replies()
            LOG_POSITION.set(self.log.position if self.log is not None else self.position)

    def _late(self, server: TrackerServer) -> None:
        log.error(
            "lease renewal has not succeeded within %.1fs (half of tracker.lease_ms = %d): another tracker "
            "may lead by now; holding every reply until a renewal succeeds",
            renewal_deadline_s(self.settings.lease_ms),
            self.settings.lease_ms,
        )
        server.hold_replies()

    # --- standby -----------------------------------------------------------------------------

    def _load(self, snapshot: object, events: list[object]) -> None:
        if snapshot is not None:  # what this copy needed was deleted under a snapshot: start again from it
            self.service.tracker = ReceivedBlockTracker(self.service.tracker.log)
            self.service.restore(snapshot)
        self.service.recover(None, events)

    def poll(self) -> None:
        """Read what the leader wrote since the last poll into the warm service."""
        got = catch_up(self.store, self.position, follower=True)
        self._load(got.snapshot, got.events)
        self.position = got.position
        LOG_POSITION.set(self.position)
        if got.gap is not None:
            missing, found = got.gap
            self.foreign(
                log_key(found), f"past the log's end: {log_key(missing)} is not written yet; following up to it"
            )

    def look(self) -> LeaseView:
        """Read the log, then the lease; a read that fails restarts the lease's timing (the leader
        could not renew while the store was away, and must not lose its lease for it)."""
        try:
            self.poll()
        except Exception:
            self.lease.forget()
            raise
        return self.lease.observe()

    async def follow(self, server: TrackerServer, *, eager: bool = False) -> None:
        """Follow the log until the lease lapses and this process takes it, then lead.

        ``eager`` (a tracker started without ``--standby``): also take a lease at once when there is
        none, or when it names this tracker's own address, a previous run whose port this one holds.
        An object at the next number that does not decode stops this tracker (the server fails
        with it): a standby that cannot follow must not look like one that does."""
        loop = asyncio.get_running_loop()
        LEADER.set(0)
        server.not_leader = ""
        while True:
            try:
                view = await loop.run_in_executor(None, self.look)
            except WALCorruption as exc:
                self.foreign(f"log after {log_key(self.position)}", str(exc))
                log.error("standby stops: it cannot follow the log past %s", log_key(self.position))
                server.on_wal_failure(exc)
                return
            except Exception as exc:  # noqa: BLE001 - the store does not answer: nothing to follow or take
                log.warning("standby cannot read the log (%s); retrying", exc)
                await asyncio.sleep(self.settings.standby_poll_ms / 1000)
                continue
            self.leader, self.leader_since_ms = view.address, view.since_ms
            server.not_leader = view.address or ""
            mine = view.node == self.writer.node  # ours: a take whose reply was lost
            previous_run = eager and (not view.exists or view.address == self.writer.address)
            if view.lapsed or mine or previous_run:
                try:
                    await loop.run_in_executor(None, self.lease.take)
                except PreconditionFailed:
                    continue  # renewed (or taken by another standby) meanwhile
                except Exception as exc:  # noqa: BLE001 - no answer: observe again (a write that landed reads as ours)
                    log.warning("taking the lease failed (%s); retrying", exc)
                    await asyncio.sleep(self.settings.standby_poll_ms / 1000)
                    continue
                started = time.monotonic()
                try:
                    commit = await loop.run_in_executor(None, self.open_leader, CatchUp(position=self.position))
                except Deposed as exc:  # another tracker keeps writing: it leads; follow it again
                    log.warning("could not fence the log (%s); following it again", exc)
                    self.lease.forget()
                    await asyncio.sleep(self.settings.standby_poll_ms / 1000)
                    continue
                server.promote(commit)
                log.info(
                    "took over from %s after its lease lapsed: fenced at object %d in %.2fs",
                    view.address,
                    self.log.position if self.log else -1,
                    time.monotonic() - started,
                )
                return
            await asyncio.sleep(self.settings.standby_poll_ms / 1000)
