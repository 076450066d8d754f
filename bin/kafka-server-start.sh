#!/usr/bin/env bash
# Usage: kafka-server-start.sh [-daemon] config/server.properties [--override key=value ...]
# Runs the broker with the repository's .venv (created by `make install-broker`, or `make install` with Spark's too).
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "USAGE: $0 [-daemon] server.properties [--override property=value]*" >&2
  exit 1
fi
base_dir=$(cd "$(dirname "$0")/.." && pwd)
python="${KBROKER_PYTHON:-$base_dir/.venv/bin/python}"
if [ ! -x "$python" ]; then
  echo "$python not found: run 'make install-broker' first" >&2
  exit 1
fi
export PYTHONPATH="$base_dir${PYTHONPATH:+:$PYTHONPATH}"
# As Kafka's kafka-run-class.sh: log files (server.log, controller.log, log-cleaner.log) in
# $LOG_DIR, by default logs/ here, and the log lines on stdout (broker/log.py).
export KBROKER_LOG_DIR="${LOG_DIR:-$base_dir/logs}"
mkdir -p "$KBROKER_LOG_DIR"
if [ "$1" = "-daemon" ]; then
  shift
  nohup "$python" -m broker "$@" >"$KBROKER_LOG_DIR/kafkaServer.out" 2>&1 </dev/null &
  exit 0
fi
exec "$python" -m broker "$@"
