"""Kafka wire protocol: sans-I/O codecs generated from Kafka's JSON message specs.

Bytes in, message objects out, and back; no sockets, asyncio, files or logging, and nothing
imported from the rest of the project (stdlib only).

Module map:
    primitives.py        wire primitives (ints, varints, strings, bytes, arrays, tagged fields)
    framing.py           FrameReader (size-prefixed frames from any split stream), frame()
    headers.py           request/response headers, header-version rules, whole-frame helpers
    api.py / api_keys.py ApiKey, API_SPECS registry (request/response class, versions, flexible_min)
    records.py           FileRegion: record data sent with sendfile, accepted by encoders
    message.py           Message, the base class of generated structs (encode/decode entry points)
    exceptions.py        ProtocolError (undecodable input), FrameTooLarge
    errors.py            ErrorCode, RETRIABLE, KafkaError                      (generated)
    messages/            one module per API: <Name>Request / <Name>Response     (generated)
    internal/            __consumer_offsets / __transaction_state records      (generated)
    internal_records.py  version-prefixed key/value helpers for the internal records
    codegen/             the generator
    spec/                Kafka's message definitions, internal-record schemas and error codes
                         (copied from Apache Kafka; see spec/README.md)

Regenerate after changing the generator or the specs:
    python -m protocol.codegen protocol/spec      (or: make generate)
"""
