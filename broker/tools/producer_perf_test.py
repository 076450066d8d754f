"""kafka-producer-perf-test.sh: produce N records of a given size at a target rate and report latency.

Output, as Kafka's ProducerPerformance prints it: every 5 seconds a window line
    12345 records sent, 2469.0 records/sec (2.41 MB/sec), 3.2 ms avg latency, 40.0 ms max latency.
and at the end the total line with percentiles
    100000 records sent, 24650.234567 records/sec (24.07 MB/sec), 5.12 ms avg latency, 98.00 ms max latency,
    4 ms 50th, 12 ms 95th, 30 ms 99th, 90 ms 99.9th.
Latency is send-to-acknowledgement per record. Payloads are random upper-case letters (Kafka's), or
lines of ``--payload-file`` split on ``--payload-delimiter``. ``--throughput -1`` means unthrottled.
"""
from __future__ import annotations

import asyncio
import os
import random
import sys
import time

from broker.client.cluster import ClusterClient
from broker.client.producer import Producer
from broker.tools.common import (ToolError, ToolParser, client_kwargs, main_entry, parse_key_values, producer_kwargs,
                                 read_properties)

MB = 1024 * 1024
DEFAULT_TRANSACTIONAL_ID = "performance-producer-default-transactional-id"


def build_parser() -> ToolParser:
    p = ToolParser("kafka-producer-perf-test.sh", "This tool is used to verify the producer performance.",
                   no_args_help_exit=0)
    p.add_argument("--topic", required=True, metavar="TOPIC", help="produce messages to this topic")
    p.add_argument("--num-records", type=int, required=True, metavar="NUM-RECORDS",
                   help="number of messages to produce")
    p.add_argument("--record-size", type=int, metavar="RECORD-SIZE",
                   help="message size in bytes. Note that you must provide exactly one of --record-size or "
                        "--payload-file.")
    p.add_argument("--payload-file", metavar="PAYLOAD-FILE",
                   help="file to read the message payloads from. This works only for UTF-8 encoded text files.")
    p.add_argument("--payload-monotonic", action="store_true",
                   help="payload is monotonically increasing integer. Note that you must provide exactly one "
                        "of --record-size or --payload-file or --payload-monotonic.")
    p.add_argument("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
                   help="provides delimiter to be used when --payload-file is provided. (default: \\n)")
    p.add_argument("--throughput", type=float, required=True, metavar="THROUGHPUT",
                   help="throttle maximum message throughput to *approximately* THROUGHPUT messages/sec. Set this "
                        "to -1 to disable throttling.")
    p.add_argument("--producer-props", nargs="+", metavar="PROP-NAME=PROP-VALUE",
                   help="kafka producer related configuration properties like bootstrap.servers,client.id etc.")
    p.add_argument("--producer.config", "--command-config", dest="producer_config", metavar="CONFIG-FILE",
                   help="producer config properties file.")
    p.add_argument("--bootstrap-server", metavar="BOOTSTRAP-SERVERS",
                   help="The server(s) to connect to (overrides bootstrap.servers in the producer properties).")
    p.add_argument("--print-metrics", action="store_true", help="print out metrics at the end of the test.")
    p.add_argument("--transactional-id", default=DEFAULT_TRANSACTIONAL_ID, metavar="TRANSACTIONAL-ID",
                   help="The transactionalId to use if transaction-duration-ms is > 0. Useful when testing the "
                        "performance of concurrent transactions. (default: "
                        f"{DEFAULT_TRANSACTIONAL_ID})")
    p.add_argument("--transaction-duration-ms", type=int, default=0, metavar="TRANSACTION-DURATION",
                   help="The max age of each transaction. The commitTransaction will be called after this time "
                        "has elapsed. Transactions are only enabled if this value is positive. (default: 0)")
    return p


class Stats:
    """Kafka's ProducerPerformance.Stats: window and total counts, latencies, sampled percentiles."""

    def __init__(self, num_records: int, window_ms: int = 5000):
        self.start = self.window_start = time.monotonic()
        self.sampling = max(1, num_records // 500000)
        self.latencies = []
        self.count = self.bytes = self.total_latency = 0
        self.max_latency = 0
        self.window_count = self.window_bytes = self.window_total_latency = self.window_max_latency = 0
        self.window = window_ms / 1000
        self.iteration = 0

    def record(self, latency_ms: int, size: int) -> None:
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.window_count += 1
        self.window_bytes += size
        self.window_total_latency += latency_ms
        self.window_max_latency = max(self.window_max_latency, latency_ms)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        self.iteration += 1
        if time.monotonic() - self.window_start >= self.window:
            self.print_window()
            self.window_start = time.monotonic()
            self.window_count = self.window_bytes = self.window_total_latency = self.window_max_latency = 0

    def print_window(self) -> None:
        elapsed = max(time.monotonic() - self.window_start, 1e-9)
        rate = self.window_count / elapsed
        mb = self.window_bytes / MB / elapsed
        avg = self.window_total_latency / self.window_count if self.window_count else 0.0
        print(f"{self.window_count} records sent, {rate:.1f} records/sec ({mb:.2f} MB/sec), {avg:.1f} ms avg latency, "
              f"{float(self.window_max_latency):.1f} ms max latency.", flush=True)

    def print_total(self) -> None:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = self.count / elapsed
        mb = self.bytes / MB / elapsed
        avg = f"{self.total_latency / self.count:.2f}" if self.count else "NaN"    # Java's 0.0/0
        lat = sorted(self.latencies)
        percs = [lat[int(p * len(lat))] if lat else 0 for p in (0.5, 0.95, 0.99, 0.999)]
        print(f"{self.count} records sent, {rate:f} records/sec ({mb:.2f} MB/sec), {avg} ms avg latency, "
              f"{float(self.max_latency):.2f} ms max latency, {percs[0]} ms 50th, {percs[1]} ms 95th, "
              f"{percs[2]} ms 99th, {percs[3]} ms 99.9th.", flush=True)


# A byte -> a letter A-Z, as Kafka's random.nextInt(26) + 65.
_LETTERS = bytes(65 + b % 26 for b in range(256))
_POOL = 1024         # random payloads made up front (Kafka makes one per record)


def payloads(opts) -> list | None:
    """The payloads to draw from, or None for --payload-monotonic (the record number)."""
    given = [opts.record_size is not None, opts.payload_file is not None, opts.payload_monotonic]
    if sum(given) != 1:
        raise ToolError("Exactly one of --record-size or --payload-file or --payload-monotonic "
                        "must be specified")
    if opts.payload_monotonic:
        return None
    if opts.record_size is not None:
        if opts.record_size < 0:
            raise ToolError("--record-size must be non-negative")
        # Random letters for each record in Kafka: here a pool of distinct random payloads, so
        # compressed batches compress like Kafka's (one payload repeated compressed to nothing).
        return [os.urandom(opts.record_size).translate(_LETTERS)
                for _ in range(max(1, min(opts.num_records, _POOL)))]
    delimiter = opts.payload_delimiter.encode().decode("unicode_escape")
    with open(opts.payload_file, encoding="utf-8") as f:
        items = [s.encode() for s in f.read().split(delimiter) if s]
    if not items:
        raise ToolError(f"File {opts.payload_file} contains no payloads")
    print(f"Number of messages read: {len(items)}")
    return items


async def run(opts) -> int:
    props = read_properties(opts.producer_config) if opts.producer_config else {}
    props.update(parse_key_values(opts.producer_props, "producer property"))
    # As Kafka's: transactions when the duration is positive, with --transactional-id (over a
    # transactional.id of the properties), each committed once it is that old.
    transactions = opts.transaction_duration_ms > 0
    if transactions:
        props["transactional.id"] = opts.transactional_id
    bootstrap = opts.bootstrap_server or props.get("bootstrap.servers")
    if not bootstrap:
        raise ToolError("Either --bootstrap-server or --producer-props bootstrap.servers must be specified")
    items = payloads(opts)
    settings = dict(acks=-1, linger_ms=0)
    settings.update(producer_kwargs(props))
    stats = Stats(opts.num_records)
    rng = random.Random()
    async with ClusterClient(bootstrap, **client_kwargs(props)) as cluster:
        producer = Producer(cluster, **settings)
        if transactions:
            await producer.init_transactions()
        start = time.monotonic()
        pending = set()
        failures = []
        in_transaction = 0                  # records sent in the open transaction
        transaction_start = 0.0

        def done(future, sent_at, size):
            pending.discard(future)
            if future.cancelled() or future.exception() is not None:
                # Kafka's callback prints the exception and the run goes on to its summary.
                failures.append(future.exception())
                sys.stderr.write(f"Error sending record: {future.exception()}\n")
                return
            stats.record(int((time.monotonic() - sent_at) * 1000), size)
        for i in range(opts.num_records):
            if items is None:
                payload = str(i).encode()
            elif opts.record_size is not None:
                payload = items[i % len(items)]
            else:
                payload = items[0] if len(items) == 1 else items[rng.randrange(len(items))]
            if transactions and not in_transaction:
                producer.begin_transaction()
                transaction_start = time.monotonic()
            sent_at = time.monotonic()
            future = await producer.send(opts.topic, payload)
            pending.add(future)
            future.add_done_callback(lambda f, t=sent_at, n=len(payload): done(f, t, n))
            in_transaction += 1
            if transactions and opts.transaction_duration_ms <= (sent_at - transaction_start) * 1000:
                await producer.commit_transaction()
                in_transaction = 0
            if opts.throughput > 0:
                ahead = (i + 1) / opts.throughput - (time.monotonic() - start)
                if ahead > 0.001:
                    await asyncio.sleep(ahead)
            elif i % 256 == 255:
                await asyncio.sleep(0)   # let the sender run
            if len(pending) > 20000:
                await asyncio.wait(list(pending)[:1000])
        if transactions and in_transaction:
            await producer.commit_transaction()
        await producer.close()
    stats.print_total()
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main)
