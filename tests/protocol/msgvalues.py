"""Value builders for the generated message classes, driven by their `_SCHEMA` rows.

`all_classes()` lists every generated top-level class with its versions; `sample()` builds a
deterministic instance whose fields all differ from their defaults (so every field of every
version is exercised); `strategy()` is the hypothesis equivalent.
"""
import random
import uuid

from hypothesis import strategies as st

import protocol.internal as internal
import protocol.messages as messages

INT_RANGES = {"int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1),
              "int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1),
              "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1)}
UNKNOWN_TAG = 1000   # far above any tag the specs use


def all_classes():
    """[(class, [versions])] of every generated top-level class."""
    result = []
    for module in (messages, internal):
        for name in module.__all__:
            cls = getattr(module, name)
            if isinstance(cls, type):
                result.append(cls)
    return sorted(result, key=lambda c: c.__name__)


def versions(cls):
    return list(range(cls.MIN_VERSION, cls.MAX_VERSION + 1))


def present(row, version):
    return row[3] is not None and row[3][0] <= version <= row[3][1]


def nullable(row, version):
    return row[4] is not None and row[4][0] <= version <= row[4][1]


def is_flexible(cls, version):
    return cls.FLEXIBLE_MIN is not None and version >= cls.FLEXIBLE_MIN


# --- deterministic samples ----------------------------------------------------------------

def _scalar_sample(ftype, rnd):
    if ftype in INT_RANGES:
        lo, hi = INT_RANGES[ftype]
        return rnd.choice([lo, hi, rnd.randint(lo, hi), 7])
    if ftype == "bool":
        return True
    if ftype == "float64":
        return rnd.choice([0.5, -1e300, 3.25])
    if ftype == "string":
        return rnd.choice(["topic-ä", "x" * rnd.randint(1, 40), "€"])
    if ftype in ("bytes", "records"):
        return bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 30)))
    if ftype == "uuid":
        return uuid.UUID(int=rnd.getrandbits(128) | 1)
    raise ValueError(ftype)


def sample(cls, version, top=None, rnd=None, depth=0, unknown_tags=True):
    """An instance with every field present in `version` set to a non-default value
    (plus an unknown tagged field in flexible versions when `unknown_tags`)."""
    top = top or cls
    rnd = rnd or random.Random(f"{cls.__qualname__}-{version}")
    kwargs = {}
    for row in cls._SCHEMA:
        attr, ftype, is_array = row[0], row[1], row[2]
        if not present(row, version):
            continue
        nested = getattr(top, ftype, None) if ftype[0].isupper() else None
        if is_array:
            count = 2 if depth < 3 else 1
            if nested is not None:
                kwargs[attr] = [sample(nested, version, top, rnd, depth + 1, unknown_tags) for _ in range(count)]
            else:
                kwargs[attr] = [_scalar_sample(ftype, rnd) for _ in range(count)]
        elif nested is not None:
            kwargs[attr] = sample(nested, version, top, rnd, depth + 1, unknown_tags)
        else:
            kwargs[attr] = _scalar_sample(ftype, rnd)
    if unknown_tags and is_flexible(cls, version):
        kwargs["unknown_tagged_fields"] = {UNKNOWN_TAG + depth: b"\x01\x02"}
    return cls(**kwargs)


# --- hypothesis strategies ----------------------------------------------------------------

_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


def _scalar_strategy(ftype):
    if ftype in INT_RANGES:
        lo, hi = INT_RANGES[ftype]
        return st.integers(lo, hi)
    if ftype == "bool":
        return st.booleans()
    if ftype == "float64":
        return st.floats(allow_nan=False)
    if ftype == "string":
        return _TEXT
    if ftype in ("bytes", "records"):
        return st.binary(max_size=24)
    if ftype == "uuid":
        return st.uuids()
    raise ValueError(ftype)


def strategy(cls, version, top=None, depth=0):
    top = top or cls
    fields = {}
    for row in cls._SCHEMA:
        attr, ftype, is_array = row[0], row[1], row[2]
        if not present(row, version):
            continue
        nested = getattr(top, ftype, None) if ftype[0].isupper() else None
        if nested is not None:
            element = (strategy(nested, version, top, depth + 1) if depth < 4
                       else st.builds(nested))
        else:
            element = _scalar_strategy(ftype)
        value = st.lists(element, max_size=3 if depth < 2 else 1) if is_array else element
        if nullable(row, version):
            value = st.none() | value
        fields[attr] = value
    if is_flexible(cls, version):
        fields["unknown_tagged_fields"] = st.none() | st.dictionaries(
            st.integers(UNKNOWN_TAG, UNKNOWN_TAG + 50), st.binary(max_size=6), max_size=2)
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))
