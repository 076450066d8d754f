#!/usr/bin/env bash
# Builds librdkafka's C load tool, rdkafka_performance, into .tools/ for the broker benchmark.
#
# The source is Debian's librdkafka source package (examples/rdkafka_performance.c, librdkafka
# 2.0.2 on bookworm). It is linked against the newer librdkafka that the confluent-kafka wheel
# bundles in the venv: Debian's 2.0.2 library cannot parse the ApiVersions response of some
# brokers (Tansu 0.6), and the same library then drives both the C and the Python load.
#
# Needs a C compiler, dpkg-dev (apt-get source) and a deb-src line for Debian main; as root it
# adds what is missing. Prints the tool's path on success; exits non-zero with one line on
# stderr otherwise (the benchmark then falls back to confluent-kafka processes).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.tools"
out="$tools/rdkafka_performance"
py="${PYTHON:-$root/.venv/bin/python}"

if [ -x "$out" ]; then echo "$out"; exit 0; fi

libdir=$("$py" -c 'import confluent_kafka, os; print(os.path.join(os.path.dirname(confluent_kafka.__file__) + ".libs"))')
lib=$(ls "$libdir"/librdkafka*.so* 2>/dev/null | head -1 || true)
if [ -z "$lib" ]; then echo "no librdkafka bundled with confluent-kafka in $libdir" >&2; exit 1; fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }

missing=""
for cmd_pkg in gcc:gcc make:make dpkg-source:dpkg-dev; do
    command -v "${cmd_pkg%%:*}" >/dev/null || missing="$missing ${cmd_pkg##*:}"
done
if [ -n "$missing" ]; then
    as_root apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq $missing >&2
fi

src="$tools/src"
mkdir -p "$src"
dir=$(ls -d "$src"/librdkafka-*/ 2>/dev/null | head -1 || true)
if [ -z "$dir" ]; then
    if ! grep -rqs '^Types: deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        # The same mirror and suite as the binary packages, source only.
        printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$(. /etc/os-release && echo "$VERSION_CODENAME")" | as_root tee /etc/apt/sources.list.d/kbroker-bench-src.sources >/dev/null
        as_root apt-get update -qq >&2
    fi
    (cd "$src" && apt-get source -qq librdkafka >&2)
    dir=$(ls -d "$src"/librdkafka-*/ | head -1)
fi

# rdkafka_performance includes the source tree's internal headers, which need config.h.
[ -f "$dir/config.h" ] || (cd "$dir" && ./configure --disable-ssl --disable-gssapi --disable-sasl >/dev/null)
gcc -O2 -w -I"$dir/src" -I"$dir" "$dir/examples/rdkafka_performance.c" -o "$out.tmp" \
    "$lib" -Wl,-rpath,"$libdir" -lpthread -lm
mv "$out.tmp" "$out"
echo "$out"
