"""Apache Kafka's own broker for the tests, the benchmarks and the demo, run from its Maven jars.

tansu (:mod:`sluice.embedded.tansu`) speaks Kafka's protocol and starts in milliseconds, but it is
not Kafka: transactions, SASL, TLS, ACLs and the exact errors a client sees are Apache Kafka's to
define.  This module starts the real broker from the jars Maven Central serves
(:func:`sluice.embedded.maven.fetch_jars`, cached once outside the repository) with ``java -cp``:
one KRaft node in combined mode (``process.roles=broker,controller``), its storage formatted by
Kafka's ``StorageTool`` with a random cluster id, on free loopback ports, with settings that make a
one-node cluster start fast (internal topics of one partition and replica, no initial rebalance
delay) and log only warnings, to a file.

Listeners: ``PLAINTEXT`` always (what :attr:`KafkaBroker.bootstrap` names and
:meth:`KafkaBroker.create_topic` uses), plus any of ``SASL_PLAINTEXT``, ``SSL`` (client
certificates required: mutual TLS) and ``SASL_SSL`` that :class:`Security` asks for, with
SCRAM-SHA-512 users created when the storage is formatted (``--add-scram``) and, optionally,
Kafka's ``StandardAuthorizer``.  The PLAINTEXT and controller listeners are the harness's own door:
their unauthenticated principal (``User:ANONYMOUS``) is a super user when the authorizer is on, so
topics are still created and ACLs granted through them, while every principal that authenticates
on the other listeners gets only what ACLs grant it.

Two releases are pinned (:data:`RELEASES`): :data:`DEFAULT_VERSION`, the newest 4.x, and
:data:`OLDEST_VERSION`, the oldest release Sluice is checked against.  The same code starts both;
what differs (Kafka 4 logs through log4j2 and moved ``AclCommand`` to ``kafka-tools``) is in
:class:`KafkaRelease`.

``python -m sluice.embedded --fetch`` fetches the pinned jars into the cache and prints where.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.embedded.certs import CertificateAuthority, KeyPair
from sluice.embedded.class_data import archive_path, keep_archive, shared_options
from sluice.embedded.kafka_config import SCRAM, Security, server_properties, write_log_config
from sluice.embedded.maven import fetch_jars
from sluice.embedded.processes import ProcessError, free_port, start_process, stop_process, wait_for_port, wait_until
from sluice.embedded.tansu import Broker
from sluice.errors import InvalidArgument

__all__ = [
    "DEFAULT_VERSION",
    "OLDEST_VERSION",
    "RELEASES",
    "KafkaBroker",
    "KafkaRelease",
    "Security",
    "broker_jvm_options",
    "kafka_jars",
    "release",
    "start_kafka",
]


@dataclass(frozen=True)
class KafkaRelease:
    """What starting one Kafka release takes beyond its version number.

    :param version: the release (``org.apache.kafka:kafka_2.13:<version>``).
    :param extra: further Maven coordinates on the classpath.
    :param acl_command: the main class of ``kafka-acls.sh`` in that release.
    :param log4j2: whether the release logs through log4j2 (Kafka 4) rather than reload4j (3.x).
    """

    version: str
    extra: tuple[str, ...] = ()
    acl_command: str = "org.apache.kafka.tools.AclCommand"
    log4j2: bool = True

    @property
    def coordinates(self) -> list[str]:
        return [f"org.apache.kafka:kafka_2.13:{self.version}", *self.extra]


RELEASES: dict[str, KafkaRelease] = {
    release.version: release
    for release in (
        # Kafka 4's kafka_2.13 POM brings log4j-core but no SLF4J binding (the distribution adds
        # log4j-slf4j-impl of the same log4j version: 2.25.5 for 4.4.0), and AclCommand lives in
        # kafka-tools.
        KafkaRelease(
            "4.4.0",
            extra=("org.apache.kafka:kafka-tools:4.4.0", "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5"),
        ),
        # 3.9 is the last 3.x, the bridge release that ZooKeeper clusters upgrade through (and so
        # the oldest many sites run); its POM has no SLF4J binding either (the distribution ships
        # slf4j-reload4j), and AclCommand is still kafka.admin.AclCommand, in the core jar.
        KafkaRelease(
            "3.9.2", extra=("org.slf4j:slf4j-reload4j:1.7.36",), acl_command="kafka.admin.AclCommand", log4j2=False
        ),
    )
}
DEFAULT_VERSION = "4.4.0"
OLDEST_VERSION = "3.9.2"

# The broker's heap: Kafka's own default is 1 GB; a test broker holding a few small topics runs in
# far less, and two cores' worth of tests may run several at once.
BROKER_HEAP = ("-Xms128m", "-Xmx384m")
# Kafka's own performance options (kafka-run-class.sh's default, shortened).
BROKER_PERFORMANCE = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")
# Short-lived tools (StorageTool, AclCommand) spend their life starting up: the C1 compiler alone
# and the serial collector start a JVM fastest.
TOOL_JVM = ("-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")
# how often a start is tried on fresh ports when another process took one first (_lost_a_port)
BIND_ATTEMPTS = 3


def broker_jvm_options(environ: Mapping[str, str]) -> list[str]:
    """The broker JVM's options as Kafka's ``kafka-run-class.sh`` reads them: ``KAFKA_HEAP_OPTS``,
    then ``KAFKA_JVM_PERFORMANCE_OPTS``, each replaced by this module's default when unset or blank."""
    return [
        *(environ.get("KAFKA_HEAP_OPTS", "").split() or BROKER_HEAP),
        *(environ.get("KAFKA_JVM_PERFORMANCE_OPTS", "").split() or BROKER_PERFORMANCE),
    ]


def release(version: str | KafkaRelease) -> KafkaRelease:
    """The pinned release ``version`` names (or ``version`` itself)."""
    if isinstance(version, KafkaRelease):
        return version
    try:
        return RELEASES[version]
    except KeyError:
        raise ProcessError(
            f"Kafka {version} is not pinned here (known: {', '.join(RELEASES)}); pass a KafkaRelease to start another"
        ) from None


def kafka_jars(version: str | KafkaRelease = DEFAULT_VERSION) -> list[Path]:
    """The classpath of a Kafka release, fetched from Maven Central on first use."""
    chosen = release(version)
    return fetch_jars(f"kafka-{chosen.version}", chosen.coordinates)


@dataclass
class KafkaBroker(Broker):
    """A running Apache Kafka broker (one KRaft node) on loopback: a :class:`Broker` like tansu's.

    :param port: the PLAINTEXT port (:attr:`bootstrap`).
    :param proc: the JVM.
    :param version: the release it runs.
    :param directory: its configuration, data and log (removed by :meth:`stop` if it made it).
    :param ports: each listener's port by security protocol (``PLAINTEXT`` included).
    :param security: the authenticated listeners, if any.
    :param ca: the CA that signed the broker's certificate and signs clients' (:meth:`client_cert`),
        when a TLS listener is open.
    :param jars: its classpath (the tools :meth:`acls` runs come from the same jars).
    :param owns_directory: whether :meth:`stop` removes ``directory`` (it made it).
    :param archive: where to keep the class-data-sharing archive this JVM writes as it exits, when
        none existed yet for its classpath.
    """

    version: KafkaRelease = field(default_factory=lambda: release(DEFAULT_VERSION))
    directory: Path = Path()
    ports: dict[str, int] = field(default_factory=dict)
    security: Security | None = None
    ca: CertificateAuthority | None = None
    jars: list[Path] = field(default_factory=list)
    owns_directory: bool = False
    archive: Path | None = None

    @property
    def log_path(self) -> Path:
        """The broker's log: warnings and errors, and whatever the JVM prints."""
        return self.directory / "server.log"

    def listener(self, protocol: str = "PLAINTEXT") -> str:
        """``127.0.0.1:<port>`` of the listener for ``protocol``."""
        if protocol not in self.ports:
            raise InvalidArgument(f"this broker has no {protocol} listener (it has {', '.join(self.ports)})")
        return f"127.0.0.1:{self.ports[protocol]}"

    def client_cert(self, name: str) -> KeyPair:
        """A client certificate for ``name`` from the broker's CA (principal ``User:<name>`` on SSL)."""
        if self.ca is None:
            raise InvalidArgument("this broker has no TLS listener: start it with Security(listeners=('SSL', ...))")
        return self.ca.client(name)

    def client_options(
        self,
        protocol: str = "PLAINTEXT",
        user: str | None = None,
        password: str | None = None,
        cert: KeyPair | None = None,
    ) -> dict[str, Any]:
        """aiokafka client keyword arguments to reach the ``protocol`` listener as ``user``.

        SASL listeners log in with SCRAM-SHA-512 as ``user`` (its password from :class:`Security`
        unless ``password`` is given, to try a wrong one); ``SSL`` presents ``cert``, by default
        ``user``'s certificate (:meth:`client_cert`).
        """
        options: dict[str, Any] = {"bootstrap_servers": self.listener(protocol), "security_protocol": protocol}
        if protocol.startswith("SASL_"):
            if user is None:
                raise InvalidArgument(f"a {protocol} client needs a user")
            known = self.security.all_users() if self.security else {}
            options.update(
                sasl_mechanism=SCRAM,
                sasl_plain_username=user,
                sasl_plain_password=password if password is not None else known.get(user, ""),
            )
        if protocol in ("SSL", "SASL_SSL"):
            assert self.ca is not None  # a TLS listener implies the CA
            if protocol == "SSL" and cert is None:
                if user is None:
                    raise InvalidArgument("an SSL client needs a user (its certificate's CN) or a cert")
                cert = self.client_cert(user)
            options["ssl_context"] = self.ca.client_context(cert)
        return options

    def _tool_options(self) -> list[str]:
        return [*TOOL_JVM, *shared_options(_class_archive(self.jars))]

    def acls(self, *args: str, timeout: float = 60.0) -> str:
        """Run Kafka's ``AclCommand`` (``kafka-acls.sh``) with ``args`` against this broker, as the
        PLAINTEXT listener's super user, and return its output; a ProcessError with it when it fails.

        aiokafka's admin client has no ACL calls, so this is Kafka's own tool from the same jars.
        """
        command = [
            *_java(self.jars, self._tool_options(), self.directory / "tools-log4j"),
            self.version.acl_command,
            "--bootstrap-server",
            self.bootstrap,
            *args,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise ProcessError(
                f"kafka-acls {' '.join(args)} failed ({done.returncode}): {_tail(done.stdout + done.stderr)}"
            )
        return done.stdout

    def allow(
        self,
        user: str,
        operations: Sequence[str],
        *,
        topic: str | None = None,
        group: str | None = None,
        transactional_id: str | None = None,
        cluster: bool = False,
    ) -> None:
        """Grant ``User:<user>`` the ``operations`` (``Read``, ``Write``, ``Describe``, ``All``, ...)
        on each named resource (``"*"`` for every one of its kind); one AclCommand run."""
        resources: list[str] = []
        for option, value in (("--topic", topic), ("--group", group), ("--transactional-id", transactional_id)):
            if value is not None:
                resources += [option, value]
        if cluster:
            resources.append("--cluster")
        if not resources or not operations:
            raise InvalidArgument("allow() needs operations and at least one resource")
        ops = [arg for op in operations for arg in ("--operation", op)]
        self.acls("--add", "--allow-principal", f"User:{user}", *ops, *resources, "--force")

    def stop(self) -> None:
        """Stop the broker (SIGTERM: a controlled shutdown) and remove its directory if it made it.

        The first broker of a classpath also leaves its class-data-sharing archive in the cache
        (:mod:`sluice.embedded.class_data`): the JVM writes it while exiting, so only a clean exit counts.
        """
        status = stop_process(self.proc)
        dumped = self.directory / "classes.jsa"
        if self.archive is not None and status in (0, 143) and dumped.is_file():
            keep_archive(dumped, self.archive)
        if self.owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_kafka(
    *,
    version: str | KafkaRelease = DEFAULT_VERSION,
    security: Security | None = None,
    start: Callable[[list[str]], subprocess.Popen] | None = None,
    tmp: Path | None = None,
    overrides: Mapping[str, str] | None = None,
    jvm_options: Sequence[str] | None = None,
    timeout: float = 120.0,
) -> KafkaBroker:
    """Apache Kafka on free loopback ports, serving metadata when this returns.

    Call it from synchronous code (a fixture), as :func:`sluice.embedded.tansu.start_broker`.

    :param version: a pinned release (:data:`RELEASES`) or a :class:`KafkaRelease`.
    :param security: authenticated listeners, users and the authorizer (:class:`Security`).
    :param start: runs the broker's command line; by default :func:`start_process` with its output
        appended to :attr:`KafkaBroker.log_path` (the demo passes its own).
    :param tmp: the directory for configuration, data and log, left in place; by default a fresh
        temporary directory that :meth:`KafkaBroker.stop` removes.
    :param overrides: further ``server.properties`` settings (they win over the defaults here).
    :param jvm_options: the broker JVM's options (heap, collector); by default, as Kafka's own
        ``kafka-run-class.sh`` reads them, ``KAFKA_HEAP_OPTS`` and ``KAFKA_JVM_PERFORMANCE_OPTS``
        from the environment, each defaulting to a small heap and Kafka's collector settings (the
        tests' tiers choose the quick-starting compiler and collector this way, see the Makefile).
    :param timeout: how long to wait for the broker to serve.
    """
    chosen = release(version)
    if jvm_options is None:
        jvm_options = broker_jvm_options(os.environ)
    if shutil.which("java") is None:
        raise ProcessError(
            "Apache Kafka needs Java 17 or newer on PATH (Debian: apt-get install openjdk-17-jre-headless)"
        )
    jars = kafka_jars(chosen)
    owns = tmp is None
    directory = Path(tempfile.mkdtemp(prefix="sluice-kafka-")) if tmp is None else Path(tmp)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        for attempt in range(BIND_ATTEMPTS):
            # each attempt in a fresh directory: a formatted log directory is not formatted again
            work = directory if attempt == 0 else directory / f"attempt-{attempt + 1}"
            try:
                return _start(chosen, jars, work, owns, security, start, overrides or {}, jvm_options, timeout)
            except ProcessError:
                if attempt + 1 == BIND_ATTEMPTS or not _lost_a_port(work / "server.log"):
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")
    except BaseException:
        if owns:
            shutil.rmtree(directory, ignore_errors=True)
        raise


def _lost_a_port(log: Path) -> bool:
    """Whether the broker failed because a port picked free was taken before it bound it.

    The ports are picked free and bound by the JVM seconds later; on a machine where other
    processes open connections meanwhile (tests on parallel workers), one of those can take a
    picked port first.  Such a start is tried again on other ports, any other failure is not."""
    try:
        return "Address already in use" in log.read_text(errors="replace")
    except OSError:
        return False


def _start(
    chosen: KafkaRelease,
    jars: list[Path],
    directory: Path,
    owns: bool,
    security: Security | None,
    start: Callable[[list[str]], subprocess.Popen] | None,
    overrides: Mapping[str, str],
    jvm_options: Sequence[str],
    timeout: float,
) -> KafkaBroker:
    """Configure, format and start the broker in ``directory``; wait until it serves."""
    ports = {"PLAINTEXT": free_port(), "CONTROLLER": free_port()}
    for protocol in security.listeners if security else ():
        ports[protocol] = free_port()
    ca = CertificateAuthority(directory / "certs") if security and security.tls else None
    log = directory / "server.log"
    properties = directory / "server.properties"
    properties.write_text(server_properties(directory, ports, security, ca, overrides))
    write_log_config(directory / "broker-log4j", log)
    write_log_config(directory / "tools-log4j", directory / "tools.log")
    archive = _class_archive(jars)
    shared = shared_options(archive)
    _format(jars, [*TOOL_JVM, *shared], properties, security, directory)
    # Without an archive yet, this broker writes one when it exits (KafkaBroker.stop keeps it).
    dump = [] if shared else [f"-XX:ArchiveClassesAtExit={directory / 'classes.jsa'}"]
    command = [*_java(jars, [*jvm_options, *shared, *dump], directory / "broker-log4j"), "kafka.Kafka", str(properties)]
    proc = (start or (lambda args: start_process(args, log=log)))(command)
    broker = KafkaBroker(
        ports["PLAINTEXT"],
        proc,
        version=chosen,
        directory=directory,
        ports={p: port for p, port in ports.items() if p != "CONTROLLER"},
        security=security,
        ca=ca,
        jars=jars,
        owns_directory=owns,
        archive=archive if dump else None,
    )
    try:
        name = f"Apache Kafka {chosen.version}"
        wait_for_port(broker.port, proc, name=name, timeout=timeout)
        wait_until(
            lambda: asyncio.run(_serves(broker.bootstrap)),
            f"{name} to answer metadata on {broker.bootstrap}",
            timeout,
            procs=[proc],
            log=log,
        )
    except BaseException:
        stop_process(proc, timeout=10)
        raise
    return broker


def _class_archive(jars: Sequence[Path]) -> Path:
    """The broker's class-data-sharing archive for these jars, named by its release's directory."""
    return archive_path(jars[0].parent.name, jars)


def _java(jars: Sequence[Path], options: Sequence[str], log_config: Path) -> list[str]:
    """``java`` with ``options``, both log configurations and ``jars`` as the classpath."""
    return [
        "java",
        *options,
        f"-Dlog4j2.configurationFile={log_config.with_suffix('.properties')}",
        f"-Dlog4j.configuration=file:{log_config.with_suffix('.log4j1.properties')}",
        "-cp",
        ":".join(map(str, jars)),
    ]


def _cluster_id() -> str:
    """A random cluster id as Kafka writes one (16 bytes, URL-safe base64 without padding), never
    starting with ``-``, which StorageTool's argument parser would take for an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _format(
    jars: list[Path], options: Sequence[str], properties: Path, security: Security | None, directory: Path
) -> None:
    """Format the log directory with a fresh cluster id, creating the SCRAM users."""
    scram = []
    for name, password in (security.all_users() if security else {}).items():
        scram += ["--add-scram", f"{SCRAM}=[name={name},password={password}]"]
    command = [
        *_java(jars, options, directory / "tools-log4j"),
        "kafka.tools.StorageTool",
        "format",
        "--cluster-id",
        _cluster_id(),
        "--config",
        str(properties),
        *scram,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise ProcessError(f"Kafka's StorageTool could not format {directory}: {_tail(done.stdout + done.stderr)}")


async def _serves(bootstrap: str) -> bool:
    """Whether the broker answers a metadata request naming itself (node 1) as a live broker."""
    # aiokafka loads when a broker is started, not with the package (the demo's --help needs none)
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    try:
        await admin.start()
        cluster = await admin.describe_cluster()
        return any(b.get("node_id") == 1 for b in cluster.get("brokers", []))
    except (KafkaError, OSError):
        return False
    finally:
        await admin.close()


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
