"""Shared test configuration.

Layers (see README, "Tests"): tests/protocol, tests/storage, tests/coordinator are pure and fast;
tests/broker drives the broker in-process; tests/integration starts the broker as a subprocess on a
free loopback port and talks to it with real Kafka clients.
"""
import os
import pathlib
import subprocess

import pytest
from hypothesis import settings

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Kept in the repository (a clone needs nothing beside it): Kafka's message specs, from which
# protocol/ is generated, and data directories written by real Apache Kafka brokers.
KAFKA_PROTOCOL = ROOT / "protocol" / "spec"
KAFKA_FIXTURES = ROOT / "tests" / "fixtures" / "kafka-data"

# CI runs every example a developer runs, and no more: keep hypothesis deterministic and bounded.
settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(scope="session")
def kafka_fixtures() -> pathlib.Path:
    """The data directories written by real Apache Kafka brokers (read-only: copy before use)."""
    return KAFKA_FIXTURES


@pytest.fixture
def small_tmpfs(tmp_path):
    """`small_tmpfs(size)`: a new tmpfs of `size` (mount's syntax: "256k", "3m") under
    tmp_path, to fill up; unmounted after the test. Needs root: skipped without it."""
    mounted = []

    def mount(size: str) -> pathlib.Path:
        path = tmp_path / f"tmpfs-{len(mounted)}"
        path.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                               str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs to fill up: {done.stderr.strip()}")
        mounted.append(path)
        return path
    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
