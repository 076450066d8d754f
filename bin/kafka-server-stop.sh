#!/usr/bin/env bash
# Sends SIGTERM to every running broker (`python -m broker ...`), like Kafka's script does for
# kafka.Kafka; the broker shuts down gracefully. Exits 1 if no broker is running.
pids=$(pgrep -f -- '-m broker( |$)' || true)
if [ -z "$pids" ]; then
  echo "No kafka server to stop"
  exit 1
fi
kill -s TERM $pids
