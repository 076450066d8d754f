"""Which `__consumer_offsets` partition holds a group: Kafka's `abs(groupId.hashCode) % n`.

Java's String.hashCode is `s[0]*31^(n-1) + ... + s[n-1]` in wrapping 32-bit arithmetic over
the string's UTF-16 code units (a character outside the BMP counts as its two surrogates).
Kafka's Utils.abs is Math.abs except that Integer.MIN_VALUE maps to 0 (not the partitioner's
`n & 0x7fffffff`: the two differ for every negative hash).
"""
OFFSETS_TOPIC = "__consumer_offsets"


def java_string_hashcode(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    h = java_string_hashcode(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
