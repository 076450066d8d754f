"""Fixtures for the tool tests: one broker subprocess per test module (tools are read-mostly and each
test uses its own topic/group names), plus helpers to run a tool in-process or through bin/*.sh.

The broker comes from tests/integration/conftest.py (``BrokerProcess``); ``broker_process`` is
re-exported for tests that need a broker of their own.
"""
import importlib.util
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load_integration_conftest():
    """tests/integration/conftest.py by path (tests/ is not a package, so it cannot be imported by name)."""
    spec = importlib.util.spec_from_file_location("_integration_conftest", ROOT / "tests" / "integration" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_integration = _load_integration_conftest()
BrokerProcess = _integration.BrokerProcess
broker_process = _integration.broker_process   # re-exported fixture


@pytest.fixture(scope="module")
def tools_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("tools-broker"),
                           {"group.initial.rebalance.delay.ms": 0, "num.partitions": 1,
                            "offsets.topic.num.partitions": 5})
    broker.start()
    yield broker
    try:
        broker.stop()
    except subprocess.TimeoutExpired:
        pass


class ToolResult:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    @property
    def lines(self):
        return self.out.splitlines()

    def __repr__(self):
        return f"ToolResult(code={self.code}, out={self.out!r}, err={self.err!r})"


@pytest.fixture
def tool(capsys):
    """tool("topics", "--list", ...) runs broker.tools.<module>.main in-process -> ToolResult."""
    import importlib

    from broker.tools.common import run

    def call(module: str, *argv):
        mod = importlib.import_module(f"broker.tools.{module}")
        capsys.readouterr()
        code = run(mod.main, [str(a) for a in argv], getattr(mod, "ERROR_PREFIX", "Error: "))
        out, err = capsys.readouterr()
        return ToolResult(code, out, err)
    return call


@pytest.fixture
def script():
    """script("kafka-topics.sh", "--list", ..., stdin=b"...") runs bin/<script> as a subprocess."""
    def call(name: str, *argv, stdin: bytes | None = None, timeout: float = 60):
        env = dict(os.environ)
        r = subprocess.run([str(ROOT / "bin" / name), *map(str, argv)], input=stdin, capture_output=True,
                           timeout=timeout, env=env)
        return ToolResult(r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace"))
    return call
