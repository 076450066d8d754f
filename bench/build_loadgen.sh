#!/usr/bin/env bash
# Builds the broker benchmark's C load generator (bench/loadgen.c) into .tools/kbroker-loadgen.
#
# It compiles against librdkafka's header from Debian (librdkafka-dev) and links the newer
# librdkafka that the confluent-kafka wheel bundles in the venv (the same library then drives
# the C and the Python load; Debian's 2.0.2 cannot parse Tansu's ApiVersions response). As root
# it installs gcc and librdkafka-dev when missing. Prints the binary's path; on failure, one line
# on stderr and a non-zero exit (the benchmark then uses confluent-kafka processes).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/bench/loadgen.c"
out="$root/.tools/kbroker-loadgen"
py="${PYTHON:-$root/.venv/bin/python}"

if [ -x "$out" ] && [ "$out" -nt "$src" ]; then echo "$out"; exit 0; fi

libdir=$("$py" -c 'import confluent_kafka, os; print(os.path.dirname(confluent_kafka.__file__) + ".libs")')
lib=$(ls "$libdir"/librdkafka*.so* 2>/dev/null | head -1 || true)
if [ -z "$lib" ]; then echo "no librdkafka bundled with confluent-kafka in $libdir" >&2; exit 1; fi

missing=""
command -v gcc >/dev/null || missing="$missing gcc"
[ -f /usr/include/librdkafka/rdkafka.h ] || missing="$missing librdkafka-dev"
if [ -n "$missing" ]; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing; } >&2 \
        || { echo "could not install$missing" >&2; exit 1; }
fi

mkdir -p "$root/.tools"
gcc -O2 -Wall -o "$out.tmp" "$src" "$lib" -Wl,-rpath,"$libdir"
mv "$out.tmp" "$out"
echo "$out"
