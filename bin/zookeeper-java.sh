# Sourced by the zookeeper-*.sh scripts: sets $java and $zk_jars for Debian's ZooKeeper, or
# says in one line what to install and exits 1.
zk_jars=/usr/share/java
if [ -n "${JAVA_HOME:-}" ]; then
  java="$JAVA_HOME/bin/java"
else
  java=$(command -v java || true)
fi
if [ -z "$java" ] || [ ! -x "$java" ]; then
  echo "${java:-java} not found: install Debian's zookeeper package, which brings Java ('make system-deps')" >&2
  exit 1
fi
if [ ! -f "$zk_jars/zookeeper.jar" ]; then
  echo "$zk_jars/zookeeper.jar not found: install Debian's zookeeper package ('make system-deps')" >&2
  exit 1
fi
