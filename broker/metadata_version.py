"""Apache Kafka's MetadataVersion names, as `inter.broker.protocol.version`,
`log.message.format.version` and the topic config `message.format.version` accept them.

Kafka 3.9 (server-common MetadataVersion.java) lists every inter-broker protocol version as a
release ("0.10.0", "3.9") and an internal version ("0.10.0-IV1", "3.9-IV0"). A value is looked
up by its first three dot-separated parts for 0.x releases and its first two otherwise, so
"0.10.0.0" means "0.10.0" and "2.8.1" means "2.8"; a release name means its latest production
internal version. Anything else is "Version X is not a valid version".

`message.format.version` has been deprecated since 3.0 and is ignored (batches are always
stored in the v2 format); Kafka only warns when it names a format older than v2 (before
0.11.0), and so do `topic_format_warning` and `broker_format_warning`.
"""
from __future__ import annotations

# (release, internal versions) in order, as in MetadataVersion.java of Kafka 3.9; versions after
# 3.9-IV0 are not production ones, so their release name alone does not select them.
_RELEASES = [
    ("0.8.0", ("",)), ("0.8.1", ("",)), ("0.8.2", ("",)), ("0.9.0", ("",)),
    ("0.10.0", ("IV0", "IV1")), ("0.10.1", ("IV0", "IV1", "IV2")), ("0.10.2", ("IV0",)),
    ("0.11.0", ("IV0", "IV1", "IV2")), ("1.0", ("IV0",)), ("1.1", ("IV0",)),
    ("2.0", ("IV0", "IV1")), ("2.1", ("IV0", "IV1", "IV2")), ("2.2", ("IV0", "IV1")),
    ("2.3", ("IV0", "IV1")), ("2.4", ("IV0", "IV1")), ("2.5", ("IV0",)), ("2.6", ("IV0",)),
    ("2.7", ("IV0", "IV1", "IV2")), ("2.8", ("IV0", "IV1")), ("3.0", ("IV0", "IV1")),
    ("3.1", ("IV0",)), ("3.2", ("IV0",)), ("3.3", ("IV0", "IV1", "IV2", "IV3")),
    ("3.4", ("IV0",)), ("3.5", ("IV0", "IV1", "IV2")), ("3.6", ("IV0", "IV1", "IV2")),
    ("3.7", ("IV0", "IV1", "IV2", "IV3", "IV4")), ("3.8", ("IV0",)), ("3.9", ("IV0",)),
    ("4.0", ("IV0", "IV1")),
]
LATEST_PRODUCTION = "3.9-IV0"

VERSIONS: list[str] = [f"{release}-{iv}" if iv else release
                       for release, ivs in _RELEASES for iv in ivs]
_ORDER = {name: i for i, name in enumerate(VERSIONS)}
_BY_NAME = dict(_ORDER)
for _release, _ivs in _RELEASES:         # a release name: its latest production version
    _production = [i for i in (_ORDER[f"{_release}-{iv}" if iv else _release] for iv in _ivs)
                   if i <= _ORDER[LATEST_PRODUCTION]]
    if _production:
        _BY_NAME[_release] = max(_production)
_FIRST_V2_FORMAT = _ORDER["0.11.0-IV0"]     # the first version writing v2 record batches


def parse(text: str) -> int:
    """The version's position in Kafka's order; ValueError with Kafka's message if unknown."""
    parts = text.split(".")
    wanted = 3 if text.startswith("0.") else 2
    key = text if len(parts) <= wanted else ".".join(parts[:wanted])
    position = _BY_NAME.get(key)
    if position is None:
        raise ValueError(f"Version {text} is not a valid version")
    return position


def validate(value) -> None:
    """A config validator (broker/config.py) for the version-valued properties."""
    if value is not None:
        parse(value)


validate.describe = "[" + ", ".join(VERSIONS) + "]"


def before_v2_format(text: str) -> bool:
    """Does this (valid) version name a record format older than v2 (Kafka's shouldWarn)?"""
    return parse(text) < _FIRST_V2_FORMAT


def _record_version(position: int) -> int:
    """The newest record batch format (0, 1, 2) a version writes."""
    return 2 if position >= _FIRST_V2_FORMAT else 1 if position >= _ORDER["0.10.0-IV0"] else 0


def format_problem(message_format: str, inter_broker_protocol: str) -> str | None:
    """Kafka's check that log.message.format.version needs no newer record format than the
    inter-broker protocol writes (it is ignored from 3.0-IV1 on); None when fine or when
    either version is invalid (refused elsewhere)."""
    try:
        ibp, fmt = parse(inter_broker_protocol), parse(message_format)
    except ValueError:
        return None
    if ibp >= _ORDER["3.0-IV1"] or _record_version(ibp) >= _record_version(fmt):
        return None
    minimum = {1: "0.10.0", 2: "0.11.0"}[_record_version(fmt)]
    return (f"log.message.format.version {message_format} can only be used when "
            f"inter.broker.protocol.version is set to version {minimum} or higher")


def _ignored(value: str, inter_broker_protocol: str) -> bool:
    """Kafka's shouldWarn: a pre-v2 format, ignored because the IBP is 3.0-IV1 or later."""
    try:
        ibp_at_least_3 = parse(inter_broker_protocol) >= _ORDER["3.0-IV1"]
    except ValueError:
        ibp_at_least_3 = True
    return ibp_at_least_3 and before_v2_format(value)


def topic_format_warning(topic: str, value: str, inter_broker_protocol: str) -> str | None:
    """Kafka's warning for a topic's deprecated message.format.version, or None."""
    if not _ignored(value, inter_broker_protocol):
        return None
    return (f"Topic configuration message.format.version with value `{value}` is ignored for "
            f"`{topic}` because the inter-broker protocol version `{inter_broker_protocol}` is "
            f"greater or equal than 3.0. This configuration is deprecated and it will be "
            f"removed in Apache Kafka 4.0.")


def broker_format_warning(value: str, inter_broker_protocol: str) -> str | None:
    """Kafka's warning for a deprecated log.message.format.version, or None."""
    if not _ignored(value, inter_broker_protocol):
        return None
    return (f"Broker configuration log.message.format.version with value {value} is ignored "
            f"because the inter-broker protocol version `{inter_broker_protocol}` is greater or "
            f"equal than 3.0. This configuration is deprecated and it will be removed in Apache "
            f"Kafka 4.0.")
