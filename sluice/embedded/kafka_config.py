"""What an embedded Apache Kafka broker is configured with: its security (:class:`Security`), its
``server.properties`` and its log configurations, as files written before the broker starts.

Kept apart from the process that runs them (:mod:`sluice.embedded.kafka`): these are plain
functions of their arguments, and every setting a test broker differs from Kafka's defaults in,
with the reason, is here in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sluice.embedded.certs import CertificateAuthority
from sluice.errors import InvalidArgument

PROTOCOLS = ("SASL_PLAINTEXT", "SSL", "SASL_SSL")
SCRAM = "SCRAM-SHA-512"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@")


@dataclass(frozen=True)
class Security:
    """Authenticated listeners, their users and the authorizer for :func:`start_kafka`.

    :param users: SCRAM-SHA-512 users and their passwords, created when the storage is formatted.
        ``admin`` (password ``admin_password``) is always added and is a super user.
    :param listeners: which of ``SASL_PLAINTEXT``, ``SSL`` (mutual TLS: a client certificate from
        the broker's CA is required; its CN is the principal, ``CN=alice`` -> ``User:alice``) and
        ``SASL_SSL`` (SCRAM over TLS, no client certificate) to open beside PLAINTEXT.
    :param authorizer: run Kafka's ``StandardAuthorizer``: a principal may do only what an ACL
        grants (:meth:`KafkaBroker.allow`) unless it is ``admin``.
    :param admin_password: the ``admin`` user's password.
    """

    users: Mapping[str, str] = field(default_factory=dict)
    listeners: tuple[str, ...] = ("SASL_PLAINTEXT",)
    authorizer: bool = False
    admin_password: str = "admin-secret"

    def __post_init__(self) -> None:
        unknown = [p for p in self.listeners if p not in PROTOCOLS]
        if unknown:
            raise InvalidArgument(f"unknown listener {unknown}; allowed: {', '.join(PROTOCOLS)}")
        for name, password in self.all_users().items():
            # StorageTool's --add-scram syntax has no escapes for ',', ']', '=' or quotes
            if not name or not password or not set(name) <= _SAFE or not set(password) <= _SAFE:
                raise InvalidArgument(f"SCRAM user names and passwords must be letters, digits, '-_.@': {name!r}")

    def all_users(self) -> dict[str, str]:
        """Every SCRAM user, ``admin`` included."""
        return {"admin": self.admin_password, **self.users}

    @property
    def tls(self) -> bool:
        """Whether a listener speaks TLS (then the broker needs certificates)."""
        return "SSL" in self.listeners or "SASL_SSL" in self.listeners


def server_properties(
    directory: Path,
    ports: Mapping[str, int],
    security: Security | None,
    ca: CertificateAuthority | None,
    overrides: Mapping[str, str],
) -> str:
    """``server.properties`` for a one-node KRaft cluster with ``ports``' listeners."""
    clients = [p for p in ports if p != "CONTROLLER"]
    settings: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{ports['CONTROLLER']}",
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items()),
        "advertised.listeners": ",".join(f"{p}://127.0.0.1:{ports[p]}" for p in clients),
        "listener.security.protocol.map": ",".join(["CONTROLLER:PLAINTEXT", *(f"{p}:{p}" for p in clients)]),
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(directory / "data"),
        # one node: every internal topic has one replica, and one partition creates fastest
        "num.partitions": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # tests run consumer groups on short sessions (a restarted member is seen gone in seconds);
        # Kafka's default floor of 6 s would refuse them with InvalidSessionTimeout
        "group.min.session.timeout.ms": "500",
        # a test creates its topics; a typo must fail, not make a topic
        "auto.create.topics.enable": "false",
    }
    if security is not None:
        for protocol in security.listeners:
            prefix = f"listener.name.{protocol.lower()}."
            if protocol.startswith("SASL_"):
                settings[prefix + "sasl.enabled.mechanisms"] = SCRAM
                settings[prefix + f"{SCRAM.lower()}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
            settings[prefix + "ssl.client.auth"] = "required" if protocol == "SSL" else "none"
        if ca is not None:
            server = ca.server("broker")
            keystore = ca.directory / "broker-keystore.pem"  # PEM keystore: the key, then the chain
            keystore.write_text(server.key.read_text() + server.cert.read_text())
            settings.update(
                {
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(keystore),
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.location": str(ca.cert),
                    # a client certificate's CN is its principal: CN=alice is User:alice, as on SASL
                    "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
                }
            )
        if security.authorizer:
            settings["authorizer.class.name"] = STANDARD_AUTHORIZER
            # ANONYMOUS: the PLAINTEXT and controller listeners, which only the harness uses
            settings["super.users"] = "User:admin;User:ANONYMOUS"
    settings.update(overrides)
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def write_log_config(stem: Path, log: Path) -> None:
    """log4j2 and reload4j configurations (``<stem>.properties``, ``<stem>.log4j1.properties``)
    that log warnings and errors to ``log``: Kafka 4 reads the first, 3.x the second."""
    stem.with_suffix(".properties").write_text(
        "status = error\n"
        "appender.file.type = File\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {log}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = warn\n"
        "rootLogger.appenderRef.file.ref = file\n"
    )
    stem.with_suffix(".log4j1.properties").write_text(
        "log4j.rootLogger=WARN, file\n"
        "log4j.appender.file=org.apache.log4j.FileAppender\n"
        f"log4j.appender.file.File={log}\n"
        "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
    )
