"""A broker subprocess per test module for the client tests (tests/integration's BrokerProcess)."""
import importlib.util
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("_integration_conftest_client",
                                               ROOT / "tests" / "integration" / "conftest.py")
_integration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_integration)
broker_process = _integration.broker_process   # re-exported fixture


@pytest.fixture(scope="module")
def client_broker(tmp_path_factory):
    broker = _integration.BrokerProcess(tmp_path_factory.mktemp("client-broker"),
                                        {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3})
    broker.start()
    yield broker
    try:
        broker.stop()
    except subprocess.TimeoutExpired:
        pass
