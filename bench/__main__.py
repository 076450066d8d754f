"""Runs the benchmarks one after the other: `python -m bench [NAME ...]`."""
import importlib
import sys
import time

# Order: cheap, pure benchmarks first; the ones that start brokers or Spark last.
BENCHMARKS = {
    "protocol": "bench.protocol_bench",
    "batch": "bench.batch_bench",
    "storage": "bench.storage_bench",
    "group": "bench.group_bench",
    "broker": "bench.broker_bench",
    "transactions": "bench.txn_bench",
    "cleaner": "bench.cleaner_bench",
    "cluster": "bench.cluster_bench",
    "reassign": "bench.reassign_bench",
    "embedded": "bench.embedded_bench",
    "spark": "bench.spark_bench",
}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}",
              file=sys.stderr)
        return 2
    failed = []
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        started = time.monotonic()
        try:
            module = importlib.import_module(BENCHMARKS[name])
        except ModuleNotFoundError as exc:
            if exc.name != BENCHMARKS[name]:
                raise
            print(f"(no {BENCHMARKS[name]} module yet)")
            continue
        try:
            module.main()
        except Exception as exc:  # one broken benchmark must not hide the others' figures
            print(f"benchmark {name} failed: {exc!r}", flush=True)
            failed.append(name)
        print(f"--- {name}: {time.monotonic() - started:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
