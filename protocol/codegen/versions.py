"""Version ranges as the specs write them ("0+", "3-7", "5", "none") and the conditions the
emitter writes for them.

A range is inclusive on both ends; `NO_VERSIONS` is empty.  `condition(present, within)` turns
"the field exists in `present`" into the shortest Python test, given that the code already
runs only for versions in `within` (a struct's own range, narrowed again by the flexible /
non-flexible split) — so most fields need no test at all.
"""
from dataclasses import dataclass

MAX_VERSION = 0x7FFF  # versions are int16 on the wire; "N+" means N..MAX_VERSION


@dataclass(frozen=True)
class Versions:
    lo: int
    hi: int

    @classmethod
    def parse(cls, text):
        text = str(text).strip()
        if text == "none":
            return NO_VERSIONS
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    @property
    def empty(self):
        return self.lo > self.hi

    def __and__(self, other):
        result = Versions(max(self.lo, other.lo), min(self.hi, other.hi))
        return NO_VERSIONS if result.empty else result

    def __contains__(self, version):
        return self.lo <= version <= self.hi

    def covers(self, other):
        """True when every version of `other` is in self."""
        return other.empty or (self.lo <= other.lo and other.hi <= self.hi)

    def __str__(self):
        if self.empty:
            return "none"
        if self.hi == MAX_VERSION:
            return f"{self.lo}+"
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


NO_VERSIONS = Versions(1, 0)
ALL_VERSIONS = Versions(0, MAX_VERSION)


def condition(present, within):
    """Python expression testing `version in present`, knowing `version in within`.

    Returns None when the test is always true and "False" when it never is.
    """
    present = present & within
    if present.empty:
        return "False"
    low = present.lo > within.lo
    high = present.hi < within.hi
    if low and high:
        if present.lo == present.hi:
            return f"version == {present.lo}"
        return f"{present.lo} <= version <= {present.hi}"
    if low:
        return f"version >= {present.lo}"
    if high:
        return f"version <= {present.hi}"
    return None
