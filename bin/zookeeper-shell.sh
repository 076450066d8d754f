#!/usr/bin/env bash
# Usage: zookeeper-shell.sh HOST:PORT[/chroot] [command ...]
# ZooKeeper's command-line client (ZooKeeperMain) from Debian's zookeeper package, like Kafka's
# script. With a command (`ls /`, `get /brokers/ids/0`, `create /path data`, `delete /path`...)
# it runs that one command and exits (a non-zero status if it failed); without one it is interactive
# (`help` lists the commands, `quit` leaves).
# As with Kafka's, the client prints "Connecting to ..." and the connection event on stdout, and
# ZooKeeper prints some results (`Created /path`, `Node does not exist: /path`) on stderr. Log
# messages (WARN and above) go to stderr.
# Environment: JAVA_HOME (else `java` on PATH), KAFKA_HEAP_OPTS (default -Xmx256M), KAFKA_OPTS
# (more JVM options, last: e.g. -Dorg.slf4j.simpleLogger.defaultLogLevel=info).
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "USAGE: $0 zookeeper_host:port[/path] [args...]" >&2
  exit 1
fi

# shellcheck source=zookeeper-java.sh
. "$(dirname "$0")/zookeeper-java.sh"

# slf4j-simple logs to stderr and is configured by system properties alone; ServiceUtils logs
# an ERROR "Exiting JVM with code 0" on every clean exit, which says nothing.
classpath="/etc/zookeeper/conf:$zk_jars/zookeeper.jar:$zk_jars/slf4j-simple.jar"
# shellcheck disable=SC2086
exec "$java" ${KAFKA_HEAP_OPTS:-"-Xmx256M"} \
  -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
  -Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.util.ServiceUtils=off \
  -cp "$classpath" ${KAFKA_OPTS:-} org.apache.zookeeper.ZooKeeperMain -server "$@"
