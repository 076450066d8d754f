#!/usr/bin/env bash
# Sends $SIGNAL (default TERM) to the running brokers (`python -m broker ...`), like Kafka's
# script does for kafka.Kafka: every one, or with --node-id=N / --process-role=R only those
# (broker/tools/server_stop.py). A broker shuts down gracefully on TERM. Exits 1 if no broker
# is running.
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="$REPO/.venv/bin/python"; [ -x "$PY" ] || PY=python3
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m broker.tools.server_stop "$@"
