"""`python -m broker config/server.properties [--override key=value ...]`: run the broker.

Exit status: 0 after a graceful shutdown (SIGTERM / SIGINT), 1 on an invalid configuration (one
line on stderr naming the property) or a start-up failure.
"""
import argparse
import asyncio
import logging
import os
import signal
import sys

from broker.config import BrokerConfig, ConfigError
from broker.log import setup_logging
from broker.cluster import ClusterJoinError
from storage.errors import LogDirUnusable

log = logging.getLogger("broker")


HARD_EXIT_AFTER_S = 9.5


def hard_exit_after(config) -> float:
    if not config.get("zookeeper.connect") or not config.get("controlled.shutdown.enable"):
        return HARD_EXIT_AFTER_S
    # Negative settings mean no attempt and no wait, as in Kafka (they have no validator).
    retries = max(config.get("controlled.shutdown.max.retries"), 0)
    backoff_s = max(config.get("controlled.shutdown.retry.backoff.ms"), 0) / 1000
    return HARD_EXIT_AFTER_S + retries * (backoff_s + 5.0)


def _hard_exit():
    log.error("Shutdown did not complete within %.1f s; exiting", HARD_EXIT_AFTER_S)
    logging.shutdown()
    os._exit(1)


def raise_open_file_limit() -> None:
    """Lift the soft RLIMIT_NOFILE to the hard limit: every connection and every segment file
    (log + two indexes) holds a descriptor, and shells often start at 1024."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY:
            hard = 1 << 20
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError) as exc:
        log.warning("Could not raise the open file limit: %s", exc)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="kafka-server-start.sh",
                                     description="Run a Kafka-compatible broker.")
    parser.add_argument("config", help="server.properties")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override a property of the file (repeatable)")
    return parser.parse_args(argv)


async def run(config: BrokerConfig) -> int:
    from broker.server import Broker
    broker = Broker(config)
    loop = asyncio.get_running_loop()
    started = False
    stop_requested = []

    def stop(signame):
        if stop_requested:
            return
        log.info("Received %s, shutting down", signame)
        stop_requested.append(signame)
        if started:
            loop.create_task(broker.shutdown())
        # Out within 10 s whatever happens; in a cluster, plus the controlled shutdown's
        # attempts (controlled.shutdown.max.retries, each waiting for the controller and then
        # controlled.shutdown.retry.backoff.ms), which Kafka lets take as long as they need.
        loop.call_later(hard_exit_after(config), _hard_exit)

    # Installed before start-up, so a signal during log recovery still stops gracefully (the
    # start finishes, then the shutdown runs) instead of killing the process mid-recovery.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig.name)
    try:
        await broker.start()
    except (ConfigError, LogDirUnusable, ClusterJoinError) as exc:
        # A setting only start-up can check, a log dir held by another broker, or one whose
        # meta.properties belongs to another broker; in a cluster, no ZooKeeper within
        # zookeeper.connection.timeout.ms, another cluster's id, a broker.id taken: one line,
        # and the dirs left as they were.
        print(f"kbroker: {exc}", file=sys.stderr)
        await broker.shutdown()
        return 1
    except OSError as exc:
        log.error("Fatal error during start-up: %s", exc)
        await broker.shutdown()
        return 1
    started = True
    if stop_requested:
        await broker.shutdown()
    await broker.wait_stopped()
    return 0


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging()
    try:
        config = BrokerConfig.from_file(args.config, args.override)
    except ConfigError as exc:
        print(f"kbroker: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"kbroker: cannot read {args.config}: {exc.strerror}", file=sys.stderr)
        return 1
    raise_open_file_limit()
    import uvloop
    return uvloop.run(run(config))


if __name__ == "__main__":
    sys.exit(main())
