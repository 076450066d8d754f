"""Benchmarks, run with `make bench` (all) or `python -m bench NAME ...` (some).

Speed and memory targets are checked here, never by timed tests. Each benchmark module has a `main()`
that prints its figures next to the reference it is compared with, measured in the same run.
"""
