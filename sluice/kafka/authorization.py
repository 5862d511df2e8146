"""Kafka's authorizer saying no, as one line that names the resource and the operation to grant.

A principal without the ACLs a consumer needs gets ``GROUP_AUTHORIZATION_FAILED`` or
``TOPIC_AUTHORIZATION_FAILED`` back, on every attempt: asking again changes nothing until an
operator grants the ACL.  Retried like an outage it becomes a storm of warnings and restarts that
hides the cause, so every Sluice consumer (the receivers, direct mode on the driver) turns those
errors into :class:`KafkaAuthorizationError` and stops.

Which operation is missing follows from the request that was refused, as Kafka's authorizer
checks them: joining a group and committing to it need ``READ`` on the group; a topic's metadata
needs ``DESCRIBE`` on it (without it, Kafka answers as if the topic were hidden); fetching its
records needs ``READ``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sluice.errors import SluiceError

__all__ = ["KafkaAuthorizationError", "authorization_error", "principal_of"]


class KafkaAuthorizationError(SluiceError, PermissionError):
    """Kafka's authorizer refused this client's principal an operation a consumer needs.

    Not retriable: the same request is refused until an ACL grants the operation.  The message
    names the resource, the operation and the ``kafka-acls`` arguments that grant it.

    :param resource: ``group`` or ``topic``.
    :param name: the group's or the topic's name.
    :param operation: the operation refused (``READ``, ``DESCRIBE``).
    :param principal: the principal refused (``User:<name>``), where the client settings tell it.
    """

    retriable = False

    def __init__(self, resource: str, name: str, operation: str, principal: str | None = None) -> None:
        self.resource, self.name, self.operation, self.principal = resource, name, operation, principal
        who = f"principal {principal}" if principal else "this client's principal"
        super().__init__(
            f"Kafka's authorizer refused {operation} on {resource} {name!r} to {who}; "
            f"grant it: kafka-acls --add --allow-principal {principal or 'User:<principal>'} "
            f"--operation {operation.capitalize()} --{resource} {name}"
        )


def principal_of(client: Mapping[str, Any]) -> str | None:
    """The principal Kafka's authorizer sees for these client settings, where they tell it: a SASL
    login's ``User:<username>`` (SCRAM and PLAIN map the name as it is).  None otherwise: a TLS
    certificate's principal depends on the broker's ``ssl.principal.mapping.rules``."""
    if str(client.get("security_protocol", "")).startswith("SASL_") and client.get("sasl_plain_username"):
        return f"User:{client['sasl_plain_username']}"
    return None


def authorization_error(
    exc: BaseException,
    *,
    group_id: str | None,
    topics: Iterable[str] = (),
    fetching: bool = False,
    principal: str | None = None,
) -> KafkaAuthorizationError | None:
    """``exc`` as a :class:`KafkaAuthorizationError` when it is the authorizer's refusal, else None.

    :param group_id: the consumer's group (aiokafka names it in some refusals, not all).
    :param topics: the topics asked for, named when aiokafka's error does not say which.
    :param fetching: the refusal answered a fetch (so ``READ`` on the topic is missing) rather
        than a metadata request (``DESCRIBE``).
    :param principal: the client's principal (:func:`principal_of`), named in the message.
    """
    # aiokafka loads only where Kafka is spoken: resolving the configuration never imports it
    from aiokafka import errors

    if isinstance(exc, KafkaAuthorizationError):
        return exc
    if isinstance(exc, errors.GroupAuthorizationFailedError):
        named = _named(exc)
        return KafkaAuthorizationError("group", named[0] if named else str(group_id), "READ", principal)
    if isinstance(exc, errors.TopicAuthorizationFailedError):
        named = _named(exc) or sorted(topics)
        return KafkaAuthorizationError("topic", ",".join(named) or "?", "READ" if fetching else "DESCRIBE", principal)
    return None


def _named(exc: BaseException) -> list[str]:
    """The resource names aiokafka put in the error: a name, or a set or list of names."""
    names: list[str] = []
    for arg in exc.args:
        if isinstance(arg, str) and arg:
            names.append(arg)
        elif isinstance(arg, (set, frozenset, list, tuple)):
            names += sorted(str(a) for a in arg)
    return names
