"""kafka-console-producer.sh's line parsing, case by case against Kafka 3.9's
LineMessageReaderTest (core/src/test/scala/unit/kafka/tools/LineMessageReaderTest.scala)."""
import re

import pytest

from broker.tools.common import ToolError
from broker.tools.console_producer import LineReader
from broker.tools.javautil import java_split

HEADERS = {"parse.key": "true", "parse.headers": "true"}


def read(props, text):
    reader = LineReader(props)
    out = []
    for line in text.split("\n"):
        try:
            key, value, headers = reader.parse(line)
            text = lambda b: None if b is None else b.decode()  # noqa: E731
            out.append((text(key), text(value), [(k, text(v)) for k, v in headers]))
        except ToolError as exc:
            out.append(str(exc))
    return out


def test_headers_key_and_value():
    assert read(HEADERS, "hk0:hv0,hk1:hv1\tkey0\tvalue0") == [
        ("key0", "value0", [("hk0", "hv0"), ("hk1", "hv1")])]
    assert read(HEADERS, ":\t\t") == [("", "", [("", "")])]       # minimal valid input
    assert read({"parse.key": "true"}, "key\t") == [("key", "", [])]


def test_demarcations_longer_than_one():
    props = {**HEADERS, "key.separator": "\t\t", "headers.delimiter": "\t\t",
             "headers.separator": "---", "headers.key.separator": "::::"}
    assert read(props, "h0::::v0---h1::::\t\tkey\t\tvalue") == [
        ("key", "value", [("h0", "v0"), ("h1", "")])]


def test_missing_separators():
    assert read(HEADERS, "h:v\tkey0\tvalue0\nh:v\tkey1[MISSING]value1") == [
        ("key0", "value0", [("h", "v")]),
        "No key separator found on line number 2: 'h:v\tkey1[MISSING]value1'"]
    assert read(HEADERS, "key[MISSING]val\tkey0\tvalue0") == [
        "No header key separator found in pair 'key[MISSING]val' on line number 1"]
    # Java's String.split: an empty header section is one empty pair
    assert read(HEADERS, "\tk\tv") == ["No header key separator found in pair '' on line number 1"]


def test_ignore_error():
    props = {**HEADERS, "ignore.error": "true"}
    assert read(props, "h0:v0\tkey0\tvalue0\n"
                       "h1:v1,h2:v2[MISSING-HD]key1\tvalue1\n"
                       "h2:v2\tkey2[MISSING-KD]value2\n"
                       "h3:v3[MISSING-HD]key3[MISSING-KD]value3\n"
                       "key-val\tkey0\tvalue0") == [
        ("key0", "value0", [("h0", "v0")]),
        (None, "value1", [("h1", "v1"), ("h2", "v2[MISSING-HD]key1")]),
        (None, "key2[MISSING-KD]value2", [("h2", "v2")]),
        (None, "h3:v3[MISSING-HD]key3[MISSING-KD]value3", []),
        ("key0", "value0", [("key-val", None)])]


def test_null_marker():
    text = "key\t\nkey\t<NULL>\nkey\t<NULL>value\n<NULL>\tvalue\n<NULL>\t<NULL>"
    props = {"parse.key": "true", "null.marker": "<NULL>"}
    assert read(props, text) == [("key", "", []), ("key", None, []), ("key", "<NULL>value", []),
                                 (None, "value", []), (None, None, [])]
    assert read({"parse.key": "true"}, text)[4] == ("<NULL>", "<NULL>", [])
    # an empty marker is a marker: empty keys and values are null
    assert read({"parse.key": "true", "null.marker": ""}, "\tv\nk\t") == [
        (None, "v", []), ("k", None, [])]


def test_null_marker_with_headers():
    text = ("h0:v0,h1:v1\t<NULL>\tvalue\n<NULL>\tkey\t<NULL>\nh0:,h1:v1\t<NULL>\t<NULL>\n"
            "h0:<NULL>,h1:v1\tkey\t<NULL>\nh0:<NULL>,h1:<NULL>value\tkey\t<NULL>")
    h1 = ("h1", "v1")
    assert read({**HEADERS, "null.marker": "<NULL>"}, text) == [
        (None, "value", [("h0", "v0"), h1]),
        ("key", None, []),                              # the header section is the marker
        (None, None, [("h0", ""), h1]),
        ("key", None, [("h0", None), h1]),
        ("key", None, [("h0", None), ("h1", "<NULL>value")])]
    assert read(HEADERS, text)[1] == "No header key separator found in pair '<NULL>' on line number 2"
    assert read({**HEADERS, "null.marker": "<NULL>"}, "<NULL>:v0,h1:v1\tkey\tvalue") == [
        "Header keys should not be equal to the null marker '<NULL>' as they can't be null"]
    assert read(HEADERS, "<NULL>:v0,h1:v1\tkey\tvalue") == [
        ("key", "value", [("<NULL>", "v0"), h1])]


@pytest.mark.parametrize("props, message", [
    ({"headers.separator": "\t"}, "headers.delimiter and headers.separator may not be equal"),
    ({"headers.key.separator": "\t"}, "headers.delimiter and headers.key.separator may not be equal"),
    ({"headers.key.separator": ","}, "headers.separator and headers.key.separator may not be equal"),
    ({"null.marker": "\t"}, "null.marker and key.separator may not be equal"),
    ({"headers.delimiter": "-", "headers.separator": ":", "headers.key.separator": "/",
      "null.marker": "-"}, "null.marker and headers.delimiter may not be equal"),
    ({"headers.delimiter": "-", "headers.separator": ":", "headers.key.separator": "/",
      "null.marker": ":"}, "null.marker and headers.separator may not be equal"),
    ({"headers.delimiter": "-", "headers.separator": ":", "headers.key.separator": "/",
      "null.marker": "/"}, "null.marker and headers.key.separator may not be equal"),
])
def test_colliding_separators_are_refused(props, message):
    with pytest.raises(ToolError, match=f"^{re.escape(message)}$"):
        LineReader({**HEADERS, **props})


def test_headers_separator_is_a_regular_expression():
    assert read({**HEADERS, "headers.separator": "[,;]"}, "a:1;b:2,c:3\tk\tv") == [
        ("k", "v", [("a", "1"), ("b", "2"), ("c", "3")])]
    with pytest.raises(ToolError, match="headers.separator"):
        LineReader({**HEADERS, "headers.separator": "("})


@pytest.mark.parametrize("text, expected", [
    ("", [""]), (",", []), ("a", ["a"]), (",a:1,,", ["", "a:1"]), ("a,,b", ["a", "", "b"])])
def test_java_split(text, expected):
    assert java_split(re.compile(","), text) == expected
    assert java_split(re.compile("|"), "abc") == ["a", "b", "c"]     # zero-width: no leading ""


def _lines(stream, prompt=False, count=None):
    import asyncio
    from broker.tools.console_producer import _input_lines

    async def go():
        out = []
        async for line in _input_lines(stream, prompt):
            out.append(line)
            if len(out) == count:
                break
        return out
    return asyncio.run(asyncio.wait_for(go(), 10))


def test_input_lines_split_across_reads():
    """The console producer reads its input a chunk at a time (not a thread trip per line):
    lines cut by the reads come out whole, empty lines stay, a last line without newline
    counts, and a \\r before the newline is left for the caller (which strips it)."""
    import io

    class Trickle(io.RawIOBase):
        def __init__(self, data):
            self.data = data

        def readable(self):
            return True

        def readinto(self, buf):
            n = min(3, len(buf), len(self.data))
            buf[:n], self.data = self.data[:n], self.data[n:]
            return n
    data = b"first line\n\nthird\r\n" + b"x" * 100 + b"\nlast"
    assert _lines(io.BufferedReader(Trickle(data), buffer_size=8)) == [
        b"first line", b"", b"third\r", b"x" * 100, b"last"]


def test_input_lines_yield_a_line_without_waiting_for_more():
    import os
    r, w = os.pipe()
    try:
        os.write(w, b"now\n")
        with os.fdopen(r, "rb", closefd=False) as stream:
            assert _lines(stream, count=1) == [b"now"]
    finally:
        os.close(w)
        os.close(r)
