"""Logging set-up: stdlib logging with Kafka's line format.

Kafka's log4j pattern is ``[%d] %p %m (%c)%n``; ours prints the same shape with the Python
logger name in place of the Java class:

    [2026-11-23 09:00:00,123] INFO [KafkaServer id=0] started (broker.server)

Levels come from the KBROKER_LOG_LEVEL environment variable (default INFO); output goes to
stderr, as `kafka-server-start.sh` does to the console.
"""
import logging
import os
import sys

FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"


def setup_logging(level: str | None = None, stream=None) -> None:
    level = (level or os.environ.get("KBROKER_LOG_LEVEL") or "INFO").upper()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Third-party chatter stays at WARNING unless asked for.
    for name in ("asyncio", "kazoo"):
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
