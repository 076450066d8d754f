#!/bin/sh
# Thin wrapper: the tool is broker/tools/reassign_partitions.py (same flags and output as Apache Kafka's).
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="$REPO/.venv/bin/python"; [ -x "$PY" ] || PY=python3
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m broker.tools.reassign_partitions "$@"
