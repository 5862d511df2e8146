"""Which Kafka partitions a reader takes: Spark's ``subscribe``, ``subscribePattern`` and ``assign``.

Pure (no broker): :meth:`TopicSelection.select` answers from a metadata snapshot, so every shell
(the direct-mode driver, ``sluice-kafka``'s stream and batch readers) picks partitions the same
way and picks up topics created later by asking again with fresh metadata.  As Spark, a pattern
must match the whole topic name (Java's ``Matcher.matches``) and internal topics (``__*``) are
never matched; ``assign`` takes exactly the partitions listed, whether or not more exist.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sluice.errors import InvalidArgument

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TopicSelection:
    """Exactly one of ``topics`` (subscribe), ``pattern`` (subscribePattern) or ``partitions`` (assign)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def __post_init__(self) -> None:
        if sum(map(bool, (self.topics, self.pattern, self.partitions))) != 1:
            raise InvalidArgument("a topic selection needs exactly one of topics, a pattern or partitions")

    def describe(self) -> str:
        if self.pattern is not None:
            return f"topics matching {self.pattern!r}"
        if self.partitions:
            return ", ".join(f"{t}/{p}" for t, p in self.partitions)
        return ", ".join(self.topics)

    def select(self, cluster: Mapping[str, Iterable[int]]) -> list[TopicPartition]:
        """The selected partitions among ``cluster`` (topic -> its partitions), sorted."""
        if self.partitions:
            return sorted(self.partitions)
        if self.pattern is not None:
            matcher = re.compile(self.pattern)
            topics = [t for t in cluster if not t.startswith("__") and matcher.fullmatch(t)]
        else:
            topics = [t for t in self.topics if t in cluster]
        return sorted((t, p) for t in topics for p in cluster[t])

    def weights(self, raw: Mapping[str, object], name: str) -> dict[str, float]:
        """Checked topic weights (``name``: the option): numbers above 0, for topics this selection
        can take (named, or matching the pattern), so a misspelt topic is refused, not ignored."""
        checked: dict[str, float] = {}
        for topic, weight in raw.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < math.inf:
                raise InvalidArgument(f"{name}: the weight of topic {topic!r} is {weight!r}: expected a number above 0")
            named = self.topics or tuple(t for t, _ in self.partitions)
            taken = re.fullmatch(self.pattern, topic) if self.pattern is not None else topic in named
            if not taken:
                raise InvalidArgument(f"{name} names topic {topic!r}, which {self.describe()} does not take")
            checked[topic] = float(weight)
        return checked

    def missing(self, cluster: Mapping[str, Iterable[int]]) -> list[str]:
        """Named topics (subscribe or assign) that ``cluster`` does not have (yet)."""
        named = self.topics or tuple(dict.fromkeys(t for t, _ in self.partitions))
        return [t for t in named if not cluster.get(t)]


def subscribe(raw: str) -> TopicSelection:
    topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
    if not topics:
        raise InvalidArgument(f"subscribe = {raw!r} names no topic: give one or more, comma-separated")
    return TopicSelection(topics=topics)


def subscribe_pattern(raw: str) -> TopicSelection:
    try:
        re.compile(raw)
    except re.error as exc:
        raise InvalidArgument(f"subscribePattern = {raw!r} is not a regular expression: {exc}") from None
    if not raw.strip():
        raise InvalidArgument("subscribePattern is empty: give a regular expression matching whole topic names")
    return TopicSelection(pattern=raw)


def assign(raw: str) -> TopicSelection:
    """Spark's ``assign`` JSON: ``{"topicA": [0, 1], "topicB": [2]}``."""
    allowed = 'JSON such as {"topicA": [0, 1], "topicB": [2]}'
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not value:
        raise InvalidArgument(f"assign = {raw!r} is not allowed: expected {allowed}")
    found: list[TopicPartition] = []
    for topic, partitions in value.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise InvalidArgument(f"assign: topic {topic!r} must list partition numbers (0 or more); {allowed}")
        found.extend((topic, p) for p in partitions)
    if not found:
        raise InvalidArgument(f"assign = {raw!r} lists no partition: expected {allowed}")
    return TopicSelection(partitions=tuple(dict.fromkeys(found)))
