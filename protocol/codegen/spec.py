"""The spec model: Kafka's JSON message definitions read into plain dataclasses.

The files are JSON with `//` comments.  Each holds one message (or internal record / header /
embedded struct): a name, `validVersions`, `flexibleVersions`, for APIs an `apiKey` and
`listeners`, and a tree of fields.  A field whose type is a struct either carries its own
`fields` or names one of the file's `commonStructs`.

Only what the emitter needs is kept; the "about" texts are dropped on purpose so that no spec
prose can reach the generated code.
"""
import json
import re
from dataclasses import dataclass, field as dc_field
from pathlib import Path

from .versions import ALL_VERSIONS, NO_VERSIONS, Versions

PRIMITIVES = {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool",
              "uuid", "string", "bytes", "records"}


def snake_case(name):
    """Mechanical CamelCase -> snake_case: TopicData -> topic_data, KRaftVersion -> k_raft_version."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


def upper_snake(name):
    return snake_case(name).upper()


@dataclass
class Field:
    name: str                      # spec name, e.g. "TopicData"
    attr: str                      # Python attribute, e.g. "topic_data"
    type: str                      # element type for arrays: "int32", "string", or a struct name
    is_array: bool
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: object                # raw "default" from the spec (None when absent)
    compact: Versions | None       # field-level flexibleVersions override (RequestHeader.ClientId)
    struct: "Struct | None" = None

    @property
    def is_struct(self):
        return self.struct is not None

    @property
    def ever_nullable(self):
        return not self.nullable.empty


@dataclass
class Struct:
    name: str                      # class name, e.g. "FetchableTopicResponse"
    fields: list
    versions: Versions             # versions in which the struct can appear


@dataclass
class Message:
    name: str                      # e.g. "FetchResponse"
    kind: str                      # request / response / header / data / metadata
    api_key: int | None
    valid: Versions
    flexible: Versions
    listeners: tuple
    root: Struct
    structs: list = dc_field(default_factory=list)   # nested structs, definition order
    source: str = ""


def strip_comments(text):
    """Removes `//` comments outside JSON strings."""
    out = []
    i, n, in_string = 0, len(text), False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load_json(path):
    return json.loads(strip_comments(Path(path).read_text()))


def load_message(path):
    raw = load_json(path)
    valid = Versions.parse(raw["validVersions"])
    flexible = Versions.parse(raw.get("flexibleVersions", "none"))
    common = {c["name"]: c for c in raw.get("commonStructs", [])}
    message = Message(name=raw["name"], kind=raw["type"], api_key=raw.get("apiKey"),
                      valid=valid, flexible=flexible, listeners=tuple(raw.get("listeners", ())),
                      root=None, source=Path(path).name)
    built = {}

    def build_struct(name, raw_fields, versions):
        if name in built:
            return built[name]
        struct = Struct(name=name, fields=[], versions=versions)
        built[name] = struct
        for raw_field in raw_fields:
            struct.fields.append(build_field(raw_field, versions))
        message.structs.append(struct)
        return struct

    def build_field(raw_field, parent_versions):
        ftype = raw_field["type"]
        is_array = ftype.startswith("[]")
        element = ftype[2:] if is_array else ftype
        versions_text = raw_field.get("versions") or raw_field.get("taggedVersions")
        versions = Versions.parse(versions_text) & parent_versions if versions_text else parent_versions
        tagged = Versions.parse(raw_field["taggedVersions"]) if "taggedVersions" in raw_field else NO_VERSIONS
        result = Field(
            name=raw_field["name"], attr=snake_case(raw_field["name"]), type=element,
            is_array=is_array, versions=versions,
            nullable=Versions.parse(raw_field.get("nullableVersions", "none")),
            tagged=tagged, tag=raw_field.get("tag"), default=raw_field.get("default"),
            compact=Versions.parse(raw_field["flexibleVersions"]) if "flexibleVersions" in raw_field else None)
        if element not in PRIMITIVES:
            if "fields" in raw_field:
                result.struct = build_struct(element, raw_field["fields"], versions)
            elif element in common:
                result.struct = build_struct(element, common[element]["fields"], ALL_VERSIONS & valid)
            else:
                raise ValueError(f"{path}: unknown type {ftype} of field {raw_field['name']}")
        return result

    root_fields = [build_field(f, valid) for f in raw["fields"]]
    message.root = Struct(name=message.name, fields=root_fields, versions=valid)
    return message


def load_all(spec_dir):
    """All messages of a kafka-protocol folder: (messages, internal records), sorted by name."""
    spec_dir = Path(spec_dir)
    messages = [load_message(p) for p in sorted((spec_dir / "messages").glob("*.json"))]
    internal = [load_message(p) for p in sorted((spec_dir / "internal-records").glob("*.json"))]
    return messages, internal


def load_errors(spec_dir):
    """errors.tsv rows as (code, NAME, retriable)."""
    rows = []
    lines = (Path(spec_dir) / "errors.tsv").read_text().splitlines()
    for line in lines[1:]:
        if not line.strip():
            continue
        code, name, retriable = line.split("\t")[:3]
        rows.append((int(code), name.strip(), retriable.strip() == "true"))
    return rows
