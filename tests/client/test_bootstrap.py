"""bootstrap.servers parsing, as Kafka's ClientUtils accepts it."""
import pytest

from broker.client.cluster import parse_bootstrap


def test_forms_kafka_accepts():
    assert parse_bootstrap("localhost:9092") == [("localhost", 9092)]
    assert parse_bootstrap(" a:1 , b:2 ,") == [("a", 1), ("b", 2)]
    assert parse_bootstrap("PLAINTEXT://broker1:9092,SASL_PLAINTEXT://broker2:9093") == [("broker1", 9092),
                                                                                        ("broker2", 9093)]
    assert parse_bootstrap("[::1]:9092") == [("::1", 9092)]
    assert parse_bootstrap(["h:1"]) == [("h", 1)]


@pytest.mark.parametrize("bad", ["not-a-url", "host:", ":9092", "host:port", "host:99999"])
def test_bad_entries_are_named(bad):
    with pytest.raises(ValueError, match=f"Invalid url in bootstrap.servers: {bad}"):
        parse_bootstrap(f"ok:1,{bad}")


def test_nothing_given():
    with pytest.raises(ValueError, match="No resolvable bootstrap urls"):
        parse_bootstrap(" , ")
