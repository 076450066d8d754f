"""kafka-server-stop.sh: send $SIGNAL (default TERM) to the brokers running on this machine, as
Kafka's script does for kafka.Kafka; a broker shuts down gracefully on TERM.

    kafka-server-stop.sh                     every broker (`python -m broker ...`)
    kafka-server-stop.sh --node-id=1         only the broker whose node.id (else broker.id) is 1
    kafka-server-stop.sh --process-role=R    only those whose process.roles is R

A broker's settings come from its command line as it was started: the properties file, a
relative path read from the broker's own working directory (Kafka's script reads it from the
directory the stop script runs in, and gives up when it is not there), and any
`--override key=value` (which wins). --node-id also matches broker.id, the name ZooKeeper-mode
brokers use (Kafka's script looks at node.id only, so in ZooKeeper mode it matched nothing). With
both filters, --node-id wins, with Kafka's notice. "No kafka server to stop" and exit status 1
when no broker runs at all; a filter that matches none stops nothing, exit 0, as Kafka's.
"""
from __future__ import annotations

import os
import signal
import sys

from broker.config import read_properties


def running_brokers() -> list[tuple[int, list[str], str]]:
    """(pid, arguments after `-m broker`, working directory) of each broker process."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            cwd = "/"             # not readable: only an absolute config path is found
        for i in range(len(argv) - 1):
            if argv[i] == "-m" and argv[i + 1] == "broker":
                found.append((int(entry), argv[i + 2:], cwd))
                break
    return sorted(found)


def setting(args: list[str], cwd: str, key: str) -> str | None:
    """`key` of a broker started with `args` (`config [--override k=v ...]`)."""
    value = None
    config = None
    i = 0
    while i < len(args):
        if args[i] == "--override" and i + 1 < len(args):
            k, sep, v = args[i + 1].partition("=")
            if sep and k.strip() == key:
                value = v.strip()
            i += 2
            continue
        if args[i].startswith("--override="):
            k, sep, v = args[i][len("--override="):].partition("=")
            if sep and k.strip() == key:
                value = v.strip()
        elif config is None and not args[i].startswith("-"):
            config = args[i]
        i += 1
    if value is not None or config is None:
        return value
    try:
        with open(os.path.join(cwd, config), encoding="utf-8", errors="replace") as f:
            return read_properties(f.read()).get(key)
    except OSError:
        return None


def option(argv: list[str], name: str) -> str | None:
    for arg in argv:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    node_id, role = option(argv, "node-id"), option(argv, "process-role")
    if node_id and role:
        print("When both node-id and process-role are provided, the value for node-id will take "
              "precedence")
    name = os.environ.get("SIGNAL", "TERM").upper()
    sig = getattr(signal, name if name.startswith("SIG") else f"SIG{name}", None)
    if sig is None:
        sig = int(name) if name.isdigit() else None
    if sig is None:
        print(f"kafka-server-stop.sh: invalid signal specification: {name}", file=sys.stderr)
        return 1
    brokers = running_brokers()
    if not brokers:
        print("No kafka server to stop")
        return 1
    for pid, args, cwd in brokers:
        if node_id:
            own = setting(args, cwd, "node.id") or setting(args, cwd, "broker.id")
            if own != node_id:
                continue
        elif role and setting(args, cwd, "process.roles") != role:
            continue
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
