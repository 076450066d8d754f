"""Checkpoint files: small text files Kafka rewrites atomically (tmp, fsync, rename, fsync dir).

Offset checkpoints (recovery-point-offset-checkpoint, replication-offset-checkpoint,
log-start-offset-checkpoint, cleaner-offset-checkpoint)::

    0                       version
    2                       number of entries
    test 0 97               <topic> <partition> <offset>
    __consumer_offsets 36 12

leader-epoch-checkpoint (one per partition folder)::

    0                       version
    2                       number of entries
    0 0                     <leader_epoch> <start_offset>
    3 1045

partition.metadata::

    version: 0
    topic_id: <the topic id in Kafka's text form: url-safe base64 of 16 bytes, no padding>

meta.properties (java.util.Properties; comment lines start with '#')::

    version=0
    broker.id=0
    cluster.id=P4mWrUMKRvm3AylnZYNBaQ

An empty file reads as no entries (Kafka's 3.1.0 fixtures ship an empty
cleaner-offset-checkpoint).  Anything else malformed raises ValueError naming the file.
"""
import base64
import os
import time
import uuid

from storage import files

CHECKPOINT_VERSION = 0


def write_checkpoint(path: str, entries, version: int = CHECKPOINT_VERSION,
                     durable: bool = True) -> None:
    """Atomically writes `entries` (iterable of tuples, each written space-separated);
    `durable`: fsync'ed before and after the rename (else the page cache keeps it)."""
    lines = [" ".join(str(part) for part in entry) for entry in entries]
    text = f"{version}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    files.fs.write_atomically(path, text.encode(), durable=durable)


def read_checkpoint(path: str, fields: int):
    """Entries of a checkpoint file as lists of strings; [] if the file is missing or empty."""
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode()
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    if not lines or (len(lines) == 1 and not lines[0].strip()):
        return []
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (ValueError, IndexError):
        raise ValueError(f"malformed checkpoint header in {path}") from None
    if version != CHECKPOINT_VERSION:
        raise ValueError(f"unsupported checkpoint version {version} in {path}")
    entries = [line.split() for line in lines[2:2 + count]]
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise ValueError(f"checkpoint {path} announces {count} entries of {fields} fields")
    return entries


def write_offsets(path: str, offsets: dict) -> None:
    """`{(topic, partition): offset}` -> an offset checkpoint file."""
    write_checkpoint(path, ((t, p, o) for (t, p), o in sorted(offsets.items())))


def read_offsets(path: str) -> dict:
    """An offset checkpoint file -> `{(topic, partition): offset}`."""
    return {(t, int(p)): int(o) for t, p, o in read_checkpoint(path, 3)}


# -- partition.metadata --------------------------------------------------------------------------

def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's `Uuid.toString()`: url-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def as_topic_id(value):
    """Accepts a uuid.UUID, 16 bytes, Kafka's base64 text or None."""
    if value is None or isinstance(value, uuid.UUID):
        return value
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        return uuid.UUID(bytes=bytes(value))
    if isinstance(value, str):
        return topic_id_from_str(value)
    raise TypeError(f"not a topic id: {value!r}")


def write_partition_metadata(directory: str, topic_id: uuid.UUID) -> None:
    text = f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}"
    files.fs.write_atomically(os.path.join(directory, files.PARTITION_METADATA), text.encode())


def read_partition_metadata(directory: str):
    """The topic id in a partition folder's partition.metadata, or None if there is none."""
    try:
        with open(os.path.join(directory, files.PARTITION_METADATA), "rb") as fh:
            text = fh.read().decode()
    except FileNotFoundError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    if fields.get("version", "").strip() != "0" or "topic_id" not in fields:
        raise ValueError(f"malformed partition.metadata in {directory}")
    return topic_id_from_str(fields["topic_id"].strip())


# -- meta.properties -----------------------------------------------------------------------------

def read_properties(path: str):
    """A java.util.Properties file (key=value lines, '#' comments) -> dict, or None if missing."""
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("latin-1")
    except FileNotFoundError:
        return None
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        props[key.strip()] = value.strip()
    return props


def write_properties(path: str, props: dict) -> None:
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    text = "#\n#" + stamp + "\n" + "".join(f"{k}={v}\n" for k, v in props.items())
    files.fs.write_atomically(path, text.encode("latin-1"))
