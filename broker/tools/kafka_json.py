"""JSON as the Kafka tools read it (Kafka's Json and DecodeJson over Jackson) and write it
(Jackson's default ObjectMapper): the same values accepted and the same messages for the
rest, e.g. ``Expected `Integer` value, received 1.7``."""
from __future__ import annotations

import json
import re

from broker.tools.common import ToolError


class Failure(ToolError):
    """An error Kafka's tool prints as "Error: <message>"."""


MISSING = object()          # Jackson's MissingNode: what blank input parses to


def node_str(value) -> str:
    """JsonNode.toString(): compact JSON (empty for MissingNode)."""
    if value is MISSING:
        return ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encode(value) -> str:
    """Json.encodeAsString (Jackson's default ObjectMapper): compact, in insertion order."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class _NonNumeric(ValueError):
    pass


def _reject_constant(token):
    raise _NonNumeric(token)


def _container_at(text: str, pos: int) -> str:
    """'Object' or 'Array': the innermost container open at `pos` (for Jackson's messages)."""
    stack, in_string, escaped = [], False, False
    for ch in text[:pos]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]" and stack:
            stack.pop()
    return "Array" if stack and stack[-1] == "[" else "Object"


def _syntax_message(text: str, e: json.JSONDecodeError) -> str:
    """Jackson's JsonParseException message for a syntax error, without the location Jackson
    adds on a second line (and the start marker's location at the end of input)."""
    pos = e.pos
    if e.msg.startswith("Unterminated string"):
        return "Unexpected end-of-input: was expecting closing quote for a string value"
    if pos >= len(text):
        return f"Unexpected end-of-input: expected close marker for {_container_at(text, pos)}"
    ch = text[pos]
    if e.msg == "Expecting value" and (ch.isalpha() or ch == "_"):
        token = re.match(r"[\w$.+-]*", text[pos:]).group(0)
        return (f"Unrecognized token '{token}': was expecting (JSON String, Number, Array, "
                "Object or token 'null', 'true' or 'false')")
    reasons = {
        "Expecting property name enclosed in double quotes":
            "was expecting double-quote to start field name",
        "Expecting ':' delimiter": "was expecting a colon to separate field name and value",
        "Expecting ',' delimiter":
            f"was expecting comma to separate {_container_at(text, pos)} entries",
        "Expecting value": "expected a valid value (JSON String, Number, Array, Object or token "
                           "'null', 'true' or 'false')",
    }
    if e.msg.startswith("Invalid control character"):
        return (f"Illegal unquoted character ((CTRL-CHAR, code {ord(ch)})): has to be escaped "
                "using backslash to be included in string value")
    reason = reasons.get(e.msg, e.msg[:1].lower() + e.msg[1:])
    return f"Unexpected character ('{ch}' (code {ord(ch)})): {reason}"


def parse_json(text: str):
    """Json.tryParseFull: a JSON value, MISSING for blank input; a Failure with Jackson's message
    for bad syntax. Like Jackson's readTree, anything after the first value is ignored."""
    if text == "":
        raise Failure("The input string shouldn't be empty")
    start = len(text) - len(text.lstrip(" \t\r\n"))
    if start == len(text):
        return MISSING
    try:
        value, _ = json.JSONDecoder(parse_constant=_reject_constant).raw_decode(text, start)
    except json.JSONDecodeError as e:
        raise Failure(_syntax_message(text, e)) from None
    except _NonNumeric as e:
        raise Failure(f"Non-standard token '{e}': enable "
                      "`JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS` to allow") from None
    return value


def as_object(value) -> dict:
    if isinstance(value, dict):
        return value
    raise Failure(f"Expected JSON object, received {node_str(value)}")


def as_array(value) -> list:
    if isinstance(value, list):
        return value
    raise Failure(f"Expected JSON array, received {node_str(value)}")


def field(obj: dict, name: str):
    if name not in obj:
        raise Failure(f"No such field exists: `{name}`")
    return obj[name]


def _to_integer(value, bits: int, name: str) -> int:
    # Jackson's isInt / isLong: a JSON integer that fits (not 1.0, "1" or true)
    if isinstance(value, int) and not isinstance(value, bool) \
            and -2**(bits - 1) <= value < 2**(bits - 1):
        return value
    raise Failure(f"Expected `{name}` value, received {node_str(value)}")


def to_int(value) -> int:
    return _to_integer(value, 32, "Integer")


def to_long(value) -> int:
    return _to_integer(value, 64, "Long")


def to_str(value) -> str:
    if isinstance(value, str):
        return value
    raise Failure(f"Expected `String` value, received {node_str(value)}")


def to_list(value, element) -> list:
    if isinstance(value, list):
        return [element(v) for v in value]
    raise Failure(f"Expected `JSON array` value, received {node_str(value)}")

