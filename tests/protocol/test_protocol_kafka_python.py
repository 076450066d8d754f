"""Cross-check against an independent encoder: kafka-python's protocol classes.

kafka-python 3 ships two encoders: the `kafka.protocol.old` Struct schemas (hand-written per
version) and the newer `ApiMessage` classes.  For every message and version both sides know,
our encoding of a sample with every field set is decoded by kafka-python and re-encoded by it;
the bytes must be identical (and kafka-python must consume all of them).
"""
import importlib
import io
import pkgutil

import pytest

import kafka.protocol as kafka_protocol
import kafka.protocol.old as kafka_old
import protocol.messages as ours
from kafka.protocol.api_message import ApiMessage
from msgvalues import sample


def _new_style_classes():
    found = {}
    for mod in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        if ".old" in mod.name or "generate" in mod.name:
            continue
        module = importlib.import_module(mod.name)
        for name in dir(module):
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage:
                found[name] = obj
    return found


def _old_style_classes():
    found = {}
    for mod in pkgutil.iter_modules(kafka_old.__path__):
        module = importlib.import_module(f"kafka.protocol.old.{mod.name}")
        for name in dir(module):
            obj = getattr(module, name)
            if isinstance(obj, type) and hasattr(obj, "SCHEMA") and "_v" in name:
                base, _, version = name.rpartition("_v")
                if version.isdigit():
                    found[(base, int(version))] = obj
    return found


NEW_CASES = []
for name, theirs in sorted(_new_style_classes().items()):
    mine = getattr(ours, name, None)
    if mine is None:
        continue
    lo, hi = theirs.min_version, theirs.max_version
    NEW_CASES += [(mine, theirs, v) for v in range(max(lo, mine.MIN_VERSION), min(hi, mine.MAX_VERSION) + 1)]

OLD_CASES = [(getattr(ours, base), cls, v) for (base, v), cls in sorted(_old_style_classes().items())
             if hasattr(ours, base) and getattr(ours, base).MIN_VERSION <= v <= getattr(ours, base).MAX_VERSION]


# Known bugs in kafka-python's hand-written old schemas (not ours): DescribeLogDirsRequest_v0
# declares `partitions` as one int32 instead of an int32 array; DescribeAclsRequest/Response_v2
# reuse the non-flexible v1 schema although v2 is a flexible version.
OLD_KAFKA_PYTHON_BUGS = {("DescribeLogDirsRequest", 0), ("DescribeAclsRequest", 2),
                         ("DescribeAclsResponse", 2)}


def our_sample(mine, version):
    message = sample(mine, version, unknown_tags=False)
    if mine is ours.ApiVersionsResponse:
        # A non-zero error_code makes clients (kafka-python too) read the body as v0, which is
        # what Kafka brokers send on error; the sample must not trip that rule.
        message.error_code = 0
    return message


def test_there_is_a_lot_to_compare():
    assert len(NEW_CASES) > 300 and len(OLD_CASES) > 250


@pytest.mark.parametrize("mine,theirs,version", NEW_CASES,
                         ids=[f"{m.__name__}-v{v}" for m, _, v in NEW_CASES])
def test_same_bytes_as_kafka_python_api_message(mine, theirs, version):
    data = our_sample(mine, version).encode(version)
    decoded = theirs.decode(data, version=version)
    decoded._header = None      # decode() leaves the header slot unset; encode() reads it
    assert decoded.encode(version=version) == data


@pytest.mark.parametrize("mine,theirs,version", OLD_CASES,
                         ids=[f"{m.__name__}-v{v}" for m, _, v in OLD_CASES])
def test_same_bytes_as_kafka_python_old_structs(mine, theirs, version):
    if (mine.__name__, version) in OLD_KAFKA_PYTHON_BUGS:
        pytest.xfail("kafka-python's old schema for this version is wrong (see OLD_KAFKA_PYTHON_BUGS)")
    data = our_sample(mine, version).encode(version)
    stream = io.BytesIO(data)
    decoded = theirs.decode(stream)
    assert stream.tell() == len(data)
    assert decoded.encode() == data
