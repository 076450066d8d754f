"""The plugin's fixtures and config overrides: marker, indirect parameter, session broker."""
import pytest

from protocol.errors import ErrorCode, KafkaError


@pytest.mark.kafka_broker_config({"num.partitions": 3}, topics={"orders": 2, "audit": 1},
                                 log_message_timestamp_type="LogAppendTime")
def test_marker_overrides_config_and_creates_topics(kafka_broker):
    config = kafka_broker.broker.config
    assert config.get("num.partitions") == 3
    assert config.get("log.message.timestamp.type") == "LogAppendTime"
    assert config.get("group.initial.rebalance.delay.ms") == 0        # a test default
    store = kafka_broker.broker.metadata
    assert len(store.get_topic("orders").partitions) == 2
    assert len(store.get_topic("audit").partitions) == 1
    kafka_broker.produce("auto", [b"x"])                                # num.partitions applies
    assert len(store.get_topic("auto").partitions) == 3


@pytest.mark.kafka_broker_config(auto_create_topics_enable=False)
def test_marker_boolean_override(kafka_broker):
    with pytest.raises(KafkaError):
        kafka_broker.produce("missing", [b"x"])
    assert kafka_broker.broker.metadata.get_topic("missing") is None


@pytest.mark.parametrize("kafka_broker", [{"num.partitions": 2}, {"num.partitions": 4}],
                         indirect=True)
def test_indirect_parameter(kafka_broker):
    kafka_broker.produce("t", [b"x"])
    assert len(kafka_broker.broker.metadata.get_topic("t").partitions) == \
        kafka_broker.broker.config.get("num.partitions")


@pytest.mark.kafka_broker_config(topics=[("compacted", 1, {"cleanup.policy": "compact"})])
def test_topic_config_overrides(kafka_broker):
    assert kafka_broker.broker.metadata.topic_config("compacted") == {"cleanup.policy": "compact"}
    with pytest.raises(KafkaError) as raised:
        kafka_broker.create_topic("compacted")
    assert raised.value.error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_session_broker_is_shared(kafka_broker_session, request):
    other = request.getfixturevalue("kafka_broker_session")
    assert other is kafka_broker_session
    kafka_broker_session.produce("session-topic-a", [b"1"])
    assert [r.value for r in kafka_broker_session.read_all("session-topic-a")] == [b"1"]


def test_session_and_function_brokers_differ(kafka_broker_session, kafka_broker):
    assert kafka_broker_session.port != kafka_broker.port
    assert kafka_broker_session.data_dir != kafka_broker.data_dir


def test_loading_the_plugin_leaves_a_projects_own_broker_package_alone(tmp_path):
    # pytest loads the plugin in every run once kbroker is installed; it must not import
    # kbroker's `broker` package, or a project's own `broker` package could not be imported.
    import subprocess
    import sys
    (tmp_path / "broker").mkdir()
    (tmp_path / "broker" / "__init__.py").write_text("")
    (tmp_path / "broker" / "orders.py").write_text("def place():\n    return 'placed'\n")
    (tmp_path / "test_app.py").write_text(
        "from broker.orders import place\n\n\ndef test_place():\n    assert place() == 'placed'\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "test_app.py"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_bad_kafka_cluster_config_markers_are_usage_errors(tmp_path):
    # Checked before anything starts: a positional string failed deep in setup, a "brokers"
    # property was written into every broker's properties, and brokers=0 waited 60 s for a
    # controller that could not be elected.
    import subprocess
    import sys
    (tmp_path / "test_bad.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.kafka_cluster_config('x')\n"
        "def test_string(kafka_cluster):\n    pass\n\n"
        "@pytest.mark.kafka_cluster_config({'brokers': 1})\n"
        "def test_property(kafka_cluster):\n    pass\n\n"
        "@pytest.mark.kafka_cluster_config(brokers=0)\n"
        "def test_none(kafka_cluster):\n    pass\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "test_bad.py"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode != 0 and "3 error" in out, out
    assert "takes one dict of properties and keyword arguments, not ('x',)" in out
    assert "the number of brokers is the keyword argument brokers=N" in out
    assert "brokers must be a whole number of at least 1, not 0" in out
