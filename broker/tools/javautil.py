"""Java's hash codes and the iteration order of java.util.HashMap and HashSet.

Kafka's tools print what its admin client hands over in HashMaps and HashSets, in the order those
iterate: by bucket (the key's hashCode with its high half folded in, masked by the table size,
which doubles whenever the entries pass three quarters of it), then in insertion order within a
bucket (a resize splits each bucket keeping its order). ``java_hash_order`` gives that order, so
that the tools' lines come out as Kafka's do; the table's initial size is the one the Java code
asks for (``new HashMap<>()``, ``new HashMap<>(n)``, the copy constructors)."""
from __future__ import annotations

from coordinator.partitioning import java_string_hashcode


def java_string_hash(s: str | None) -> int:
    """String.hashCode (null: 0, as Objects.hashCode), as an unsigned 32-bit value."""
    return 0 if s is None else java_string_hashcode(s) & 0xFFFFFFFF


def java_int_hash(value: int) -> int:
    """Integer.hashCode."""
    return value & 0xFFFFFFFF


def java_long_hash(value: int) -> int:
    """Long.hashCode: the two halves XORed."""
    value &= 0xFFFFFFFFFFFFFFFF
    return (value ^ (value >> 32)) & 0xFFFFFFFF


def java_tp_hash(tp) -> int:
    """TopicPartition.hashCode."""
    return (31 * (31 + tp.partition) + java_string_hash(tp.topic)) & 0xFFFFFFFF


def table_size_for(capacity: int) -> int:
    """HashMap.tableSizeFor: the power of two at or above ``capacity`` (at least 1)."""
    return 1 << max(0, capacity - 1).bit_length()


def copy_capacity(n: int) -> int:
    """Table size of ``new HashSet<>(collection of n)``: max((int) (n / .75f) + 1, 16)."""
    return table_size_for(max(int(n / 0.75) + 1, 16))


def map_copy_capacity(n: int) -> int:
    """Table size of ``new HashMap<>(map of n)``: tableSizeFor((int) (n / 0.75f + 1))."""
    return table_size_for(int(n / 0.75 + 1))


def java_hash_order(keys, hash_of, capacity: int = 16) -> list:
    """``keys`` put in this order (repeats dropped) into a java.util.HashMap or HashSet whose
    initial capacity is ``capacity``: the order it iterates them in."""
    unique = list(dict.fromkeys(keys))
    table = table_size_for(capacity)
    while len(unique) > int(table * 0.75):
        table *= 2

    def bucket(key) -> int:
        h = hash_of(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (table - 1)
    return sorted(unique, key=bucket)


def java_split(pattern, text: str, keep_trailing: bool = False) -> list:
    """Java's String.split(regex) (`pattern` a compiled re): no match gives [text] (so "" gives
    [""]), a zero-width match at the start gives no leading empty string, and trailing empty
    strings are dropped (kept with `keep_trailing`: Java's split(regex, -1))."""
    parts, last = [], 0
    for match in pattern.finditer(text):
        if match.end() == 0:
            continue
        parts.append(text[last:match.start()])
        last = match.end()
    if not parts:
        return [text]
    parts.append(text[last:])
    while parts and parts[-1] == "" and not keep_trailing:
        parts.pop()
    return parts


def scala_hash_set_order(groups, hash_of) -> list:
    """The iteration order of a Scala 2.13 ``mutable.HashSet`` filled by ``++=`` of each group
    of ``groups`` in turn (Kafka's TransactionMetadata.topicPartitions, printed by its tools):
    by bucket (the hash with its high half folded in, masked by the table size: 16 at first,
    doubled before an element would bring the count to three quarters of it, and at least the
    size a group's ``sizeHint`` asks for), then by the folded hash, as a signed int, within a
    bucket (Scala keeps each bucket sorted so), equal hashes in insertion order."""
    def table_size_for(capacity: int) -> int:
        return min(1 << 30, 1 << max(capacity - 1, 4).bit_length())

    size, folded = table_size_for(16), {}
    for group in groups:
        group = list(dict.fromkeys(group))
        size = max(size, table_size_for(int((len(group) + 1) / 0.75)))
        for key in group:
            if key in folded:
                continue
            if len(folded) + 1 >= int(size * 0.75):
                size *= 2
            h = hash_of(key) & 0xFFFFFFFF
            h ^= h >> 16
            folded[key] = h - (1 << 32) if h & 0x80000000 else h
    return sorted(folded, key=lambda k: (folded[k] & (size - 1), folded[k]))
