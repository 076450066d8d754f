"""kafka-consumer-perf-test.sh: consume N messages as fast as possible and report throughput.

Output, as Kafka's ConsumerPerformance prints it: a header line and one summary line
    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
    fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    2026-11-23 09:00:00:123, 2026-11-23 09:00:05:456, 95.3674, 17.8837, 100000, 18752.3441, 3012, 2321, ...
(``--show-detailed-stats`` prints a line per ``--reporting-interval`` instead, starting with
``time, threadId``). Rebalance time is the time to join the group; fetch time is the rest. In
the detailed lines, as Kafka's: the first interval starts before the join and shows it, the
later ones show a join time of 0. A poll returns at most ``max.poll.records`` (default 5000 here,
from ``--consumer.config``). When ``--timeout`` ms pass without a record the run ends early with
Kafka's WARNING line. ``--print-metrics`` is accepted and prints nothing: this client keeps none
of the Java client's metrics.
"""
from __future__ import annotations

import random
import time

from broker.client.cluster import ClusterClient
from broker.client.consumer import Consumer
from broker.tools.common import ToolError, ToolParser, client_kwargs, consumer_kwargs, main_entry, read_properties

MB = 1024 * 1024


def build_parser() -> ToolParser:
    p = ToolParser("kafka-consumer-perf-test.sh", "This tool helps in performance test for the full zookeeper "
                   "consumer")
    p.add_argument("--bootstrap-server", metavar="<String: server to connect to>",
                   help="REQUIRED unless --broker-list(deprecated) is specified. The server(s) to connect to.")
    p.add_argument("--broker-list", metavar="<String: broker-list>", help="DEPRECATED, use --bootstrap-server.")
    p.add_argument("--topic", required=True, metavar="<String: topic>", help="REQUIRED: The topic to consume from.")
    p.add_argument("--messages", type=int, required=True, metavar="<Long: count>",
                   help="REQUIRED: The number of messages to send or consume")
    p.add_argument("--group", metavar="<String: gid>", help="The group id to consume on. (default: perf-consumer-NNNNN)")
    p.add_argument("--fetch-size", type=int, default=1048576, metavar="<Integer: size>",
                   help="The amount of data to fetch in a single request. (default: 1048576)")
    p.add_argument("--from-latest", action="store_true",
                   help="If the consumer does not already have an established offset to consume from, start with the "
                        "latest message present in the log rather than the earliest message.")
    p.add_argument("--hide-header", action="store_true", help="If set, skips printing the header for the stats")
    p.add_argument("--print-metrics", action="store_true", help="Print out the metrics.")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="<Integer: interval_ms>",
                   help="Interval in milliseconds at which to print progress info. (default: 5000)")
    p.add_argument("--show-detailed-stats", action="store_true",
                   help="If set, stats are reported for each reporting interval as configured by reporting-interval")
    p.add_argument("--socket-buffer-size", type=int, default=2097152, metavar="<Integer: size>",
                   help="The size of the tcp RECV size. (accepted for compatibility)")
    p.add_argument("--threads", type=int, default=10, metavar="<Integer: count>", help="DEPRECATED; ignored.")
    p.add_argument("--num-fetch-threads", type=int, default=1, metavar="<Integer: count>", help="DEPRECATED; ignored.")
    p.add_argument("--timeout", type=int, default=10000, metavar="<Long: milliseconds>",
                   help="The maximum allowed time in milliseconds between returned records. (default: 10000)")
    p.add_argument("--consumer.config", "--command-config", dest="consumer_config", metavar="<String: config file>",
                   help="Consumer config properties file.")
    p.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS", metavar="<String: date format>",
                   help="The date format to use for formatting the time field. (default: yyyy-MM-dd HH:mm:ss:SSS)")
    return p


def java_date(ms: float, pattern: str) -> str:
    """Format epoch ms with the common SimpleDateFormat letters (yyyy MM dd HH mm ss SSS)."""
    t = time.localtime(ms / 1000)
    out = pattern
    for token, value in (("yyyy", f"{t.tm_year:04d}"), ("SSS", f"{int(ms) % 1000:03d}"), ("MM", f"{t.tm_mon:02d}"),
                         ("dd", f"{t.tm_mday:02d}"), ("HH", f"{t.tm_hour:02d}"), ("mm", f"{t.tm_min:02d}"),
                         ("ss", f"{t.tm_sec:02d}")):
        out = out.replace(token, value)
    return out


async def run(opts) -> int:
    bootstrap = opts.bootstrap_server or opts.broker_list
    if not bootstrap:
        raise ToolError("Missing required argument \"[bootstrap-server]\"")
    if opts.reporting_interval <= 0:
        raise ToolError("Reporting interval must be greater than 0.")
    props = read_properties(opts.consumer_config) if opts.consumer_config else {}
    # Kafka's ConsumerPerfOptions sets group.id itself: --group, else a new random group (a
    # group.id in --consumer.config is overwritten, so a run never resumes an earlier one).
    group = opts.group or f"perf-consumer-{random.randrange(100000)}"
    header_summary = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                      "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    header_detailed = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                       "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    if not opts.hide_header:
        print(header_detailed if opts.show_detailed_stats else header_summary, flush=True)
    async with ClusterClient(bootstrap, **client_kwargs(props)) as cluster:
        await cluster.topic_metadata(opts.topic)
        settings = dict(max_poll_records=5000)
        settings.update(consumer_kwargs(props))
        settings.update(group_id=group, auto_offset_reset="latest" if opts.from_latest else "earliest",
                        max_partition_fetch_bytes=opts.fetch_size)
        consumer = Consumer(cluster, **settings)
        consumer.subscribe([opts.topic])
        start_ms = time.time() * 1000
        join_start = time.monotonic()
        await consumer.membership.ensure_active()
        join_ms = int((time.monotonic() - join_start) * 1000)
        fetch_start = time.monotonic()
        messages = bytes_read = 0
        # Kafka's first interval starts before the group is joined and counts the join time
        # apart; later ones have none (its joinTimeMsInSingleRound is reset after a report)
        last_report, join_in_round = join_start, join_ms
        last_messages = last_bytes = 0
        last_record = time.monotonic()
        timed_out = False
        while messages < opts.messages:
            records = await consumer.poll(timeout_ms=100, max_records=min(consumer.max_poll_records,
                                                                          opts.messages - messages))
            now = time.monotonic()
            if records:
                last_record = now
                for r in records:
                    messages += 1
                    bytes_read += (len(r.key) if r.key else 0) + (len(r.value) if r.value else 0)
            elif (now - last_record) * 1000 > opts.timeout:
                timed_out = True
                break
            if opts.show_detailed_stats and (now - last_report) * 1000 >= opts.reporting_interval:
                elapsed_ms = max(int((now - last_report) * 1000), 1)      # whole ms, as Kafka
                fetch_ms_round = elapsed_ms - join_in_round
                mb = (bytes_read - last_bytes) / MB
                n = messages - last_messages
                fetch_rates = (f"{1000 * mb / fetch_ms_round:.4f}, {1000 * n / fetch_ms_round:.4f}"
                               if fetch_ms_round > 0 else "0.0000, 0.0000")
                print(f"{java_date(time.time() * 1000, opts.date_format)}, 0, {bytes_read / MB:.4f}, "
                      f"{1000 * mb / elapsed_ms:.4f}, {messages}, {1000 * n / elapsed_ms:.4f}, "
                      f"{join_in_round}, {fetch_ms_round}, {fetch_rates}", flush=True)
                last_report, last_messages, last_bytes = now, messages, bytes_read
                join_in_round = 0
        end_ms = time.time() * 1000
        fetch_ms = int((time.monotonic() - fetch_start) * 1000)
        await consumer.close()
    if timed_out:
        print(f"WARNING: Exiting before consuming the expected number of messages: timeout ({opts.timeout} ms) "
              "exceeded. You can use the --timeout option to increase the timeout.")
    if not opts.show_detailed_stats:
        elapsed = max((end_ms - start_ms) / 1000, 1e-9)
        fetch_s = max(fetch_ms / 1000, 1e-9)
        mb = bytes_read / MB
        print(f"{java_date(start_ms, opts.date_format)}, {java_date(end_ms, opts.date_format)}, {mb:.4f}, "
              f"{mb / elapsed:.4f}, {messages}, {messages / elapsed:.4f}, {join_ms}, {fetch_ms}, "
              f"{mb / fetch_s:.4f}, {messages / fetch_s:.4f}")
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main)
