#!/bin/sh
# Thin wrapper: the tool is broker/tools/leader_election.py (same flags and output as Apache Kafka's).
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="$REPO/.venv/bin/python"; [ -x "$PY" ] || PY=python3
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m broker.tools.leader_election "$@"
