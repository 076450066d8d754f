#!/usr/bin/env bash
# Usage: zookeeper-server-stop.sh [zookeeper.properties]
# Sends SIGTERM (or $SIGNAL) to every running ZooKeeper server, i.e. every java process running
# QuorumPeerMain, like Kafka's script; ZooKeeper shuts down cleanly on it. Given a properties
# file, it stops only the servers started on that file by bin/zookeeper-server-start.sh (the
# file's path, resolved to an absolute one, is on their command line) and leaves any other
# ZooKeeper on the machine alone. Exits 1 if there is no server to stop.
config=""
if [ $# -ge 1 ]; then
  config=$1
  if [ -e "$config" ]; then
    config="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"
  fi
fi

# Reads each java process's exact arguments from /proc (Linux, like Debian's ZooKeeper itself).
pids=""
for pid in $(pgrep -x java || true); do
  { mapfile -d '' -t args <"/proc/$pid/cmdline"; } 2>/dev/null || continue
  for ((i = 1; i < ${#args[@]}; i++)); do
    if [[ ${args[i]} == *QuorumPeerMain ]]; then
      if [ -z "$config" ] || [ "${args[i + 1]:-}" = "$config" ]; then
        pids="$pids $pid"
      fi
      break
    fi
  done
done

if [ -z "$pids" ]; then
  echo "No zookeeper server to stop"
  exit 1
fi
kill -s "${SIGNAL:-TERM}" $pids
