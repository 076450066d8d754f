"""`LogConfig`: the topic-level settings one partition's log obeys, with Apache Kafka's defaults.

Field names are Kafka's topic property names in snake_case (``segment.bytes`` ->
`segment_bytes`).  The broker owns the declarative config table (types, validators, docs, broker
synonyms such as ``log.segment.bytes``); this class only carries resolved values, and
`from_properties` parses the topic names so tests and tools can build one from a dict.
Defaults are Kafka 3.x's (`TopicConfig` / `LogConfig` documentation).
"""
import dataclasses
import random

LONG_MAX = 2**63 - 1          # Kafka's Long.MAX_VALUE, used for "never"
DAY_MS = 24 * 60 * 60 * 1000


@dataclasses.dataclass
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024            # segment.bytes: 1 GiB
    segment_ms: int = 7 * DAY_MS                         # segment.ms: 7 days
    segment_jitter_ms: int = 0                           # segment.jitter.ms
    segment_index_bytes: int = 10 * 1024 * 1024          # segment.index.bytes: 10 MiB
    index_interval_bytes: int = 4096                     # index.interval.bytes
    retention_bytes: int = -1                            # retention.bytes: unlimited
    retention_ms: int = 7 * DAY_MS                       # retention.ms: 7 days (-1 = forever)
    max_message_bytes: int = 1024 * 1024 + 12            # max.message.bytes: 1048588
    message_timestamp_type: str = "CreateTime"           # message.timestamp.type
    message_timestamp_difference_max_ms: int = LONG_MAX  # deprecated in 3.6, still honoured
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    flush_messages: int = LONG_MAX                       # flush.messages: leave it to the OS
    flush_ms: int = LONG_MAX                             # flush.ms
    cleanup_policy: str = "delete"                       # cleanup.policy
    file_delete_delay_ms: int = 60_000                   # file.delete.delay.ms
    min_insync_replicas: int = 1                         # min.insync.replicas
    compression_type: str = "producer"                   # compression.type
    preallocate: bool = False                            # preallocate
    delete_retention_ms: int = DAY_MS                    # delete.retention.ms
    min_compaction_lag_ms: int = 0                       # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX                # max.compaction.lag.ms
    min_cleanable_dirty_ratio: float = 0.5               # min.cleanable.dirty.ratio
    unclean_leader_election_enable: bool = False         # unclean.leader.election.enable
    message_downconversion_enable: bool = True           # message.downconversion.enable

    @classmethod
    def from_properties(cls, props: dict, base: "LogConfig | None" = None) -> "LogConfig":
        """A config from Kafka topic property names (string values), over `base` or defaults.

        Unknown names are ignored here (the broker's config table validates names)."""
        values = dataclasses.asdict(base) if base is not None else {}
        for name, raw in props.items():
            field = _FIELDS.get(name)
            if field is None:
                continue
            values[field.name] = _parse(field.type, raw)
        return cls(**values)

    def to_properties(self) -> dict:
        """Kafka property names -> string values (for DescribeConfigs and tools)."""
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool):
                value = "true" if value else "false"
            out[field.name.replace("_", ".")] = str(value)
        return out

    def random_segment_jitter(self, rng=random) -> int:
        """Kafka's per-segment roll jitter: uniform in [0, min(segment.jitter.ms, segment.ms))."""
        bound = min(self.segment_jitter_ms, self.segment_ms)
        return rng.randrange(bound) if bound > 0 else 0

    @property
    def roll_ms(self) -> int:
        """How old a segment may get before it rolls: segment.ms, or max.compaction.lag.ms
        when that is shorter on a compacted log (so its records become cleanable in time), as
        Kafka's LogConfig.maxSegmentMs."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.replace(" ", "").split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.replace(" ", "").split(",")


_FIELDS = {f.name.replace("_", "."): f for f in dataclasses.fields(LogConfig)}


def _parse(kind, raw):
    if not isinstance(raw, str):
        return raw
    raw = raw.strip()
    if kind in (int, "int"):
        return int(raw)
    if kind in (float, "float"):
        return float(raw)
    if kind in (bool, "bool"):
        if raw.lower() not in ("true", "false"):
            raise ValueError(f"not a boolean: {raw!r}")
        return raw.lower() == "true"
    return raw
