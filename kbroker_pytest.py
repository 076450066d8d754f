"""pytest plugin (entry point `pytest11: kbroker`): an embedded Kafka broker as a fixture.

    def test_roundtrip(kafka_broker):                      # a fresh broker for this test
        kafka_broker.produce("events", [b"a", b"b"])
        assert [r.value for r in kafka_broker.read_all("events")] == [b"a", b"b"]

    @pytest.mark.kafka_broker_config({"num.partitions": 3}, topics={"orders": 3})
    def test_configured(kafka_broker): ...

    @pytest.mark.parametrize("kafka_broker", [{"log.message.timestamp.type": "LogAppendTime"}],
                             indirect=True)
    def test_parametrized(kafka_broker): ...

    def test_shared(kafka_broker_session): ...             # one broker for the whole session

    def test_failover(kafka_cluster):                      # ZooKeeper and three brokers
        leader = kafka_cluster.leader("orders", 0)
        kafka_cluster.kill(leader)                         # also pause/resume/stop/restart
        kafka_cluster.wait_for_leader("orders", 0, not_in={leader})

    @pytest.mark.kafka_cluster_config(brokers=5, min_insync_replicas=2)
    def test_bigger(kafka_cluster): ...

`kafka_broker` (function scope) is a `broker.embedded.EmbeddedBroker`, started before the test
and stopped after it whatever the outcome (port closed, temporary dir removed). Its broker
config comes from the `kafka_broker_config` marker (a dict and/or keyword arguments, where
`num_partitions=3` means `num.partitions`; `topics=` and `data_dir=` are passed to the broker)
and from an indirect parameter (a dict with the same keys). `kafka_broker_session` is one broker
with the default config shared by the session: give each test its own topic names.

`kafka_cluster` (function scope) is a `broker.testing.cluster.KafkaCluster`: a real ZooKeeper
(Debian's zookeeper package, Java) and broker processes on free loopback ports, stopped after
the test; `cluster.bootstrap_servers` is what clients connect to. Its `kafka_cluster_config`
marker takes `brokers=` (default 3) and broker properties for every broker.

The plugin is loaded by pytest whenever the package is installed; importing it is cheap (the
broker itself is imported when a fixture first starts one). It is a top-level module of its own
so that loading it does not import kbroker's `broker` package: a project with a package of that
name keeps it in every test that does not use these fixtures. `-p no:kbroker` turns it off. A
project conftest defining its own `kafka_broker` fixture overrides this one in its directory.
"""
from __future__ import annotations

import pytest

MARKER = "kafka_broker_config"
CLUSTER_MARKER = "kafka_cluster_config"
_ARGUMENTS = ("topics", "data_dir")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{MARKER}(config=None, *, topics=None, data_dir=None, **properties): broker config "
        "overrides for the kafka_broker fixture (properties: num_partitions=3 means "
        "num.partitions)")
    config.addinivalue_line(
        "markers",
        f"{CLUSTER_MARKER}(config=None, *, brokers=3, **properties): the kafka_cluster "
        "fixture's broker count and broker properties (min_insync_replicas=2 means "
        "min.insync.replicas)")


def _options(request) -> dict:
    """The kafka_broker_config marker(s) and an indirect parameter -> EmbeddedBroker kwargs."""
    config, kwargs = {}, {}

    def add(values: dict, dotted: bool) -> None:
        for key, value in values.items():
            if key in _ARGUMENTS:
                kwargs[key] = value
            else:
                config[key.replace("_", ".") if dotted else key] = value

    # closest marker last, so it wins over a module- or class-level one
    for marker in reversed(list(request.node.iter_markers(MARKER))):
        if len(marker.args) > 1 or (marker.args and not isinstance(marker.args[0], dict)):
            raise pytest.UsageError(f"@pytest.mark.{MARKER} takes one dict of properties "
                                    f"and keyword arguments, not {marker.args!r}")
        add(marker.args[0] if marker.args else {}, dotted=False)
        add(marker.kwargs, dotted=True)
    param = getattr(request, "param", None)
    if param is not None:
        if not isinstance(param, dict):
            raise pytest.UsageError(f"an indirect kafka_broker parameter is a dict of broker "
                                    f"properties, not {param!r}")
        add(param, dotted=False)
    return {"config": config, **kwargs}


@pytest.fixture
def kafka_broker(request):
    """An embedded broker for this test (see the kafka_broker_config marker)."""
    from broker.embedded import EmbeddedBroker
    with EmbeddedBroker(**_options(request)) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_broker_session():
    """One embedded broker with the default config for the whole session."""
    from broker.embedded import EmbeddedBroker
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def kafka_cluster(request, tmp_path):
    """ZooKeeper and brokers as processes for this test (see the kafka_cluster_config marker)."""
    from broker.testing.cluster import KafkaCluster
    brokers, config = 3, {}
    for marker in reversed(list(request.node.iter_markers(CLUSTER_MARKER))):
        if len(marker.args) > 1 or (marker.args and not isinstance(marker.args[0], dict)):
            raise pytest.UsageError(f"@pytest.mark.{CLUSTER_MARKER} takes one dict of properties "
                                    f"and keyword arguments, not {marker.args!r}")
        if marker.args and "brokers" in marker.args[0]:
            raise pytest.UsageError(f"@pytest.mark.{CLUSTER_MARKER}: the number of brokers is "
                                    f"the keyword argument brokers=N, not a property")
        config.update(marker.args[0] if marker.args else {})
        for key, value in marker.kwargs.items():
            if key == "brokers":
                if type(value) is not int or value < 1:
                    raise pytest.UsageError(f"@pytest.mark.{CLUSTER_MARKER}: brokers must be a "
                                            f"whole number of at least 1, not {value!r}")
                brokers = value
            else:
                config[key.replace("_", ".")] = value
    with KafkaCluster(brokers, tmp_path / "kafka-cluster", config=config) as cluster:
        yield cluster
