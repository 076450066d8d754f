"""Load-generator workers for bench/broker_bench.py: each runs in its own process (spawned, so
librdkafka never crosses a fork) and drives a broker with confluent-kafka (librdkafka).

Every worker sets itself up (connects, fetches metadata, joins or assigns), then sleeps until the
shared `start_at` (time.monotonic(); CLOCK_MONOTONIC is system-wide on Linux, so processes agree),
runs its bounded loop, and returns a dict with its counts, first/last timestamps and the CPU it
used (getrusage of the whole process: Python plus librdkafka's threads) during the measured part.
Every loop is bounded by a count and a deadline.
"""
from __future__ import annotations

import random
import resource
import struct
import time

_TS = struct.Struct(">q")
PAYLOAD_VARIANTS = 512


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def send_paced(producer, rate: int, produce, done, check_s: float = 0.05) -> int:
    """Call `produce(i)` for message i at `rate` messages a second (catching up after a slow
    poll), serving `producer`'s callbacks, until `done(elapsed s, sent)` holds (looked at every
    `check_s`); a full producer queue skips to the next tick. Returns how many were sent."""
    t0 = time.monotonic()
    sent, next_check = 0, t0
    while True:
        now = time.monotonic()
        if now >= next_check:
            if done(now - t0, sent):
                return sent
            next_check = now + check_s
        due = int((now - t0) * rate) + 1
        while sent < due:
            try:
                produce(sent)
            except BufferError:
                break
            sent += 1
        producer.poll(0)
        time.sleep(0.0005)


def payloads(size: int, count: int = PAYLOAD_VARIANTS, seed: int = 7) -> list[bytes]:
    """JSON-ish event records padded to `size` bytes: compressible the way application data is
    (lz4 roughly 2-3x), and distinct so the compressor cannot just dedupe one value."""
    rng = random.Random(seed)
    words = ["click", "view", "purchase", "checkout", "search", "mobile", "desktop", "en-GB",
             "fr-FR", "product", "category", "session", "referrer", "campaign", "basket"]
    out = []
    for i in range(count):
        parts = [f'{{"id":{rng.randrange(10**9)},"user":"user_{rng.randrange(10**6)}",'
                 f'"event":"{rng.choice(words)}","ts":{1_700_000_000_000 + i}']
        while sum(map(len, parts)) < size:
            parts.append(f',"{rng.choice(words)}":"{rng.choice(words)}-{rng.randrange(1000)}"')
        out.append("".join(parts).encode()[:size - 1] + b"}")
    return out


def _producer(bootstrap: str, extra: dict):
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": bootstrap, "delivery.report.only.error": True,
            "queue.buffering.max.messages": 500_000, "queue.buffering.max.kbytes": 1_048_576}
    conf.update(extra)
    return Producer(conf)


def produce(bootstrap: str, topic: str, size: int, conf: dict, start_at: float,
            duration_s: float, max_messages: int) -> dict:
    """Produce `size`-byte values as fast as the client takes them, until `max_messages` or
    `duration_s`, then flush. Only failed deliveries call back (delivery.report.only.error)."""
    errors = []
    producer = _producer(bootstrap, dict(conf, **{"error_cb": lambda e: errors.append(str(e))}))
    values = payloads(size)
    # Warm up: metadata fetched and a connection to the broker open before the clock starts.
    producer.produce(topic, values[0], on_delivery=lambda err, msg: err and errors.append(str(err)))
    producer.flush(30)
    _sleep_until(start_at)
    cpu0, t0 = _cpu(), time.monotonic()
    deadline = t0 + duration_s
    sent = 0
    nvalues = len(values)
    produce_ = producer.produce
    while sent < max_messages:
        try:
            for i in range(sent, min(sent + 1000, max_messages)):
                produce_(topic, values[i % nvalues])
            sent = min(sent + 1000, max_messages)
        except BufferError:
            sent = i
            producer.poll(0.001)
        if time.monotonic() >= deadline:
            break
        producer.poll(0)
    left = producer.flush(60)
    t1 = time.monotonic()
    return {"messages": sent - left, "bytes": (sent - left) * size, "t0": t0, "t1": t1,
            "cpu": _cpu() - cpu0, "errors": errors[:3] + ([f"... {left} not delivered"] if left else [])}


def _at_end(consumer, positions) -> bool:
    from confluent_kafka import TopicPartition
    for tp in positions:
        high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                              timeout=5)[1]
        if tp.offset < high:
            return False
    return True


def consume(bootstrap: str, topic: str, group: str, share: int, start_at: float,
            timeout_s: float, conf: dict) -> dict:
    """Consume `topic` from the beginning as a member of consumer group `group` that expects
    `share` partitions, until its partitions reach their high watermarks or `timeout_s` passes.
    Times run from the first message to the last."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer(dict({"bootstrap.servers": bootstrap, "group.id": group,
                       "auto.offset.reset": "earliest", "enable.auto.commit": False,
                       "session.timeout.ms": 30_000}, **conf))
    # Hold fetching until the group is settled (every member has its share), so no rebalance
    # during the measurement makes a member read its partitions again.
    def on_assign(consumer, partitions):
        consumer.assign(partitions)
        consumer.pause(partitions)
    c.subscribe([topic], on_assign=on_assign)
    settle_by = start_at + 20
    while time.monotonic() < settle_by and (time.monotonic() < start_at
                                            or len(c.assignment()) != share):
        c.poll(0.05)            # serves the rebalance callbacks; paused, so returns no messages
    c.resume(c.assignment())
    cpu0 = _cpu()
    deadline = time.monotonic() + timeout_s
    count = nbytes = 0
    first = last = None
    while time.monotonic() < deadline:
        msgs = c.consume(num_messages=10_000, timeout=0.2)
        if msgs:
            now = time.monotonic()
            if first is None:
                first = now
            last = now
            for m in msgs:
                if m.error() is None:
                    count += 1
                    nbytes += len(m.value())
            continue
        # Nothing for 0.2 s: done once every assigned partition is at its high watermark.
        assignment = c.assignment()
        if first is not None and assignment and _at_end(c, c.position(assignment)):
            break
    cpu = _cpu() - cpu0
    c.close()
    return {"messages": count, "bytes": nbytes, "t0": first, "t1": last, "cpu": cpu}


def latency_consumer(bootstrap: str, topic: str, partitions: int, conf: dict, start_at: float,
                     duration_s: float, warmup_s: float) -> dict:
    """Read `topic` (assigned, from offset 0) and record monotonic now - the send time stamped in
    each value, for messages sent after `warmup_s`."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer(dict({"bootstrap.servers": bootstrap, "group.id": "latency",
                       "enable.auto.commit": False}, **conf))
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    c.consume(num_messages=1, timeout=0.5)          # connect and start fetching
    _sleep_until(start_at)
    cpu0 = _cpu()
    measure_from = int((start_at + warmup_s) * 1e9)
    deadline = start_at + duration_s + 5
    samples = []
    received = 0
    stop_at = None
    while time.monotonic() < deadline:
        m = c.poll(0.05)          # poll returns as soon as a message is there; consume waits
        if m is not None and m.error() is None:
            now = time.monotonic_ns()
            received += 1
            sent = _TS.unpack_from(m.value())[0]
            if sent >= measure_from:
                samples.append(now - sent)
        if stop_at is None and time.monotonic() >= start_at + duration_s:
            stop_at = time.monotonic() + 1.0         # drain what is still in flight, briefly
        if stop_at is not None and time.monotonic() >= stop_at:
            break
    cpu = _cpu() - cpu0
    c.close()
    return {"samples_ns": samples, "received": received, "cpu": cpu}


def latency_producer(bootstrap: str, topic: str, size: int, rate: int, conf: dict,
                     start_at: float, duration_s: float) -> dict:
    """Produce `size`-byte values at a fixed `rate` per second (paced per millisecond), each
    stamped with time.monotonic_ns() at produce() time."""
    producer = _producer(bootstrap, conf)
    base = payloads(size, count=64)
    producer.produce(topic, base[0])
    producer.flush(30)
    _sleep_until(start_at)
    cpu0, t0 = _cpu(), time.monotonic()
    total = int(rate * duration_s)
    sent = 0
    while sent < total:
        now = time.monotonic()
        if now - t0 > duration_s + 5:
            break
        due = min(total, int((now - t0) * rate) + 1)
        while sent < due:
            value = _TS.pack(time.monotonic_ns()) + base[sent & 63][8:]
            try:
                producer.produce(topic, value)
            except BufferError:
                break
            sent += 1
        producer.poll(0)
        time.sleep(0.0005)
    left = producer.flush(30)
    return {"messages": sent - left, "cpu": _cpu() - cpu0, "t0": t0, "t1": time.monotonic()}
