#!/usr/bin/env bash
# Usage: zookeeper-server-start.sh [-daemon] config/zookeeper.properties
# Runs a ZooKeeper server (QuorumPeerMain: standalone when the file lists no server.N members)
# from Debian's zookeeper package (ZooKeeper 3.8; `make system-deps` installs it) with Java.
# -daemon runs it in the background, its output in ${LOG_DIR:-<repo>/logs}/zookeeper.out.
# Log messages go to the console through Debian's /etc/zookeeper/conf/log4j.properties (INFO and
# above); nothing is written under /var/log/zookeeper.
# Environment, as for Kafka's script: JAVA_HOME (else `java` on PATH), KAFKA_HEAP_OPTS (default
# -Xmx512M -Xms512M), KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_LOG4J_OPTS (replaces the console logging
# above, e.g. -Dzookeeper.root.logger=INFO,ROLLINGFILE writes $LOG_DIR/zookeeper.log),
# KAFKA_OPTS (more JVM options, last).
set -euo pipefail
usage() {
  echo "USAGE: $0 [-daemon] zookeeper.properties" >&2
  exit 1
}
[ $# -ge 1 ] || usage
daemon=""
if [ "$1" = "-daemon" ]; then
  daemon=1
  shift
fi
# One argument only: QuorumPeerMain reads more than one as "port dataDir ..." instead of a file.
[ $# -eq 1 ] || usage

base_dir=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=zookeeper-java.sh
. "$(dirname "$0")/zookeeper-java.sh"

config=$1
if [ ! -f "$config" ]; then
  echo "$config: no such file" >&2
  exit 1
fi
# An absolute path: ZooKeeper warns about relative ones, and zookeeper-server-stop.sh FILE finds
# the server by it whatever the directory it was started from.
config="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"

log_dir="${LOG_DIR:-$base_dir/logs}"
# zookeeper.jar's manifest names its dependencies (netty, slf4j-api, jute...); the conf dir holds
# log4j.properties, and slf4j-log4j12 + log4j 1.2 make ZooKeeper log through it (without a
# binding, slf4j drops every message).
classpath="/etc/zookeeper/conf:$zk_jars/zookeeper.jar:$zk_jars/slf4j-log4j12.jar:$zk_jars/log4j-1.2.jar"
heap_opts=${KAFKA_HEAP_OPTS:-"-Xmx512M -Xms512M"}
perf_opts=${KAFKA_JVM_PERFORMANCE_OPTS:-"-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true"}
log4j_opts=${KAFKA_LOG4J_OPTS:-"-Dzookeeper.root.logger=INFO,CONSOLE"}
# Unquoted on purpose: each *_OPTS variable holds several JVM options.
# shellcheck disable=SC2086
set -- "$java" $heap_opts $perf_opts "-Dzookeeper.log.dir=$log_dir" $log4j_opts \
  -cp "$classpath" ${KAFKA_OPTS:-} org.apache.zookeeper.server.quorum.QuorumPeerMain "$config"

if [ -n "$daemon" ]; then
  mkdir -p "$log_dir"
  nohup "$@" >"$log_dir/zookeeper.out" 2>&1 </dev/null &
  exit 0
fi
exec "$@"
