"""Logging set-up: stdlib logging with Kafka's line format.

Kafka's log4j pattern is ``[%d] %p %m (%c)%n``; ours prints the same shape with the Python
logger name in place of the Java class, and log4j's level names (WARN, FATAL):

    [2026-11-23 09:00:00,123] INFO [KafkaServer id=0] started (broker.server)

Levels come from the KBROKER_LOG_LEVEL environment variable (default INFO). Output goes to stderr;
started by `bin/kafka-server-start.sh` (which sets KBROKER_LOG_DIR to $LOG_DIR, by default
logs/), as Kafka's log4j.properties has it: the lines go to stdout and to
KBROKER_LOG_DIR/server.log, the controller's to controller.log and the log cleaner's to
log-cleaner.log only (Kafka's additivity=false). The files are appended to and reopened when
moved away (logrotate), not rolled every hour as log4j's DailyRollingFileAppender does: several
brokers sharing a log dir would rename each other's files.
"""
import logging
import os
import sys

FORMAT = "[%(asctime)s] %(kafka_level)s %(message)s (%(name)s)"
# log4j's level names, so a search for Kafka's "WARN ..." line finds ours too.
_LOG4J_NAMES = {"WARNING": "WARN", "CRITICAL": "FATAL"}


class KafkaFormatter(logging.Formatter):
    def format(self, record):
        record.kafka_level = _LOG4J_NAMES.get(record.levelname, record.levelname)
        return super().format(record)


def setup_logging(level: str | None = None, stream=None) -> None:
    name = (level or os.environ.get("KBROKER_LOG_LEVEL") or "INFO").upper()
    level = LEVELS.get(name, LEVELS.get(_LOG4J_NAMES.get(name, name)))
    if level is None:       # a typo in the environment: said once, INFO meanwhile
        print(f"kbroker: unknown log level {name!r} in KBROKER_LOG_LEVEL (one of "
              f"{', '.join(LEVELS)}); using INFO", file=sys.stderr)
        level = logging.INFO
    log_dir = os.environ.get("KBROKER_LOG_DIR")
    handler = logging.StreamHandler(stream or (sys.stdout if log_dir else sys.stderr))
    handler.setFormatter(KafkaFormatter(FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for loggers in LOG_FILES.values():         # as they were before any earlier set-up
        for logger_name in loggers:
            logger = logging.getLogger(logger_name)
            for old in list(logger.handlers):
                logger.removeHandler(old)
            logger.propagate = True
    if log_dir:
        _log_files(log_dir)
    # Third-party chatter stays at WARNING unless asked for.
    for name in ("asyncio", "kazoo"):
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))


# Kafka's log4j.properties: file -> the loggers writing only there (additivity=false)
LOG_FILES = {"controller.log": ("broker.controller",),
             "log-cleaner.log": ("kbroker.log_cleaner",)}


def _log_files(log_dir: str) -> None:
    import logging.handlers

    def file_handler(name):
        h = logging.handlers.WatchedFileHandler(os.path.join(log_dir, name), encoding="utf-8")
        h.setFormatter(KafkaFormatter(FORMAT))
        return h
    try:
        os.makedirs(log_dir, exist_ok=True)
        logging.getLogger().addHandler(file_handler("server.log"))
        for name, loggers in LOG_FILES.items():
            handler = file_handler(name)
            for logger_name in loggers:
                logger = logging.getLogger(logger_name)
                logger.addHandler(handler)
                logger.propagate = False
    except OSError as exc:
        print(f"kbroker: cannot write log files in {log_dir}: {exc}; logging to the console "
              f"only", file=sys.stderr)


# -- logger levels as a config resource (DescribeConfigs/IncrementalAlterConfigs BROKER_LOGGER) --
# Kafka names log4j's levels; Python has no TRACE or OFF, so TRACE sits below DEBUG and OFF above
# CRITICAL (no record reaches it). Reading maps Python's WARNING/CRITICAL back to Kafka's words.

ROOT_LOGGER = "root"
LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
          "ERROR": logging.ERROR, "FATAL": logging.CRITICAL, "OFF": logging.CRITICAL + 10}
_NAMES = {number: name for name, number in LEVELS.items()}


def level_name(number: int) -> str:
    return _NAMES.get(number) or logging.getLevelName(number)


def _effective_level(name: str) -> int:
    """A logger's level, else its nearest ancestor's, without creating any logger."""
    loggers = logging.Logger.manager.loggerDict
    while name:
        logger = loggers.get(name)
        if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET:
            return logger.level
        name = name.rpartition(".")[0]
    return logging.getLogger().level


def logger_levels() -> dict:
    """{logger name: effective level} for the root logger ("root") and every logger in the
    hierarchy so far (packages like "broker" included), root first, then by name: what Kafka's
    broker-logger resource lists."""
    out = {ROOT_LOGGER: level_name(logging.getLogger().level)}
    for name in sorted(logging.Logger.manager.loggerDict):
        out[name] = level_name(_effective_level(name))
    return out


def logger_exists(name: str) -> bool:
    return name == ROOT_LOGGER or name in logging.Logger.manager.loggerDict


def set_logger_level(name: str, level: str | None) -> None:
    """Set a logger's level (a name of LEVELS); None makes it inherit its parent's again."""
    logger = logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)
    logger.setLevel(logging.NOTSET if level is None else LEVELS[level])
