#!/usr/bin/env bash
# Usage: kafka-server-start.sh [-daemon] config/server.properties [--override key=value ...]
# Runs the broker with the repository's .venv (created by `make install`).
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "USAGE: $0 [-daemon] server.properties [--override property=value]*" >&2
  exit 1
fi
base_dir=$(cd "$(dirname "$0")/.." && pwd)
python="${KBROKER_PYTHON:-$base_dir/.venv/bin/python}"
if [ ! -x "$python" ]; then
  echo "$python not found: run 'make install' first" >&2
  exit 1
fi
export PYTHONPATH="$base_dir${PYTHONPATH:+:$PYTHONPATH}"
if [ "$1" = "-daemon" ]; then
  shift
  log_dir="${LOG_DIR:-$base_dir/logs}"
  mkdir -p "$log_dir"
  nohup "$python" -m broker "$@" >"$log_dir/server.out" 2>&1 </dev/null &
  exit 0
fi
exec "$python" -m broker "$@"
