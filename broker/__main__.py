"""`python -m broker config/server.properties [--override key=value ...]`: run the broker.

Exit status: 0 after a graceful shutdown (SIGTERM / SIGINT / SIGHUP), 1 on a bad command line, an
invalid configuration (one line on stderr naming the property) or a start-up failure. SIGQUIT
prints every thread's stack to stderr (as a JVM's thread dump) and the broker goes on.
"""
import argparse
import asyncio
import faulthandler
import logging
import os
import signal
import sys

from broker.config import BrokerConfig, ConfigError
from broker.log import setup_logging
from broker.cluster import LEADERSHIP_MOVE_WAIT_S, ClusterJoinError
from storage.errors import LogDirUnusable

log = logging.getLogger("broker")


HARD_EXIT_AFTER_S = 9.5


def hard_exit_after(config) -> float:
    if not config.get("zookeeper.connect") or not config.get("controlled.shutdown.enable"):
        return HARD_EXIT_AFTER_S
    # Negative settings mean no attempt and no wait, as in Kafka (they have no validator).
    retries = max(config.get("controlled.shutdown.max.retries"), 0)
    backoff_s = max(config.get("controlled.shutdown.retry.backoff.ms"), 0) / 1000
    # each attempt: connected within controller.socket.timeout.ms, answered within
    # request.timeout.ms (broker/cluster.py), then the backoff
    attempt_s = (max(config.get("controller.socket.timeout.ms"), 0)
                 + max(config.get("request.timeout.ms"), 0)) / 1000
    # and after a successful attempt, the wait for the other brokers to name the new leaders
    return HARD_EXIT_AFTER_S + retries * (attempt_s + backoff_s) + LEADERSHIP_MOVE_WAIT_S


def _hard_exit(after_s: float):
    log.error("Shutdown did not complete within %.1f s; exiting", after_s)
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


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # exit status 1 for a bad command line, as Kafka's (argparse's own is 2)
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def parse_args(argv):
    from broker.client.connection import CLIENT_SOFTWARE_VERSION
    parser = _Parser(prog="kafka-server-start.sh", description="Run a Kafka-compatible broker.")
    parser.add_argument("--version", action="version", version=CLIENT_SOFTWARE_VERSION,
                        help="print the version and exit, as Kafka's --version")
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
        after_s = hard_exit_after(config)
        loop.call_later(after_s, _hard_exit, after_s)

    # Installed before start-up, so a signal during log recovery still stops gracefully (the
    # start finishes, then the shutdown runs) instead of killing the process mid-recovery.
    # As Kafka's: TERM, INT and HUP (a closed terminal) shut down cleanly; HUP stays ignored
    # when it is (nohup, as -daemon starts it). QUIT prints every thread's stack and goes on,
    # as the JVM's thread dump does.
    signals = [signal.SIGTERM, signal.SIGINT]
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signals.append(signal.SIGHUP)
    for sig in signals:
        loop.add_signal_handler(sig, stop, sig.name)
    faulthandler.register(signal.SIGQUIT, all_threads=True)
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
