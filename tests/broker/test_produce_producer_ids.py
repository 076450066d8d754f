"""Producer id blocks: unique, monotonic, never repeated after a restart."""
import json

from broker.producer_ids import FILE_NAME, FileBlockStore, ProducerIdManager


def test_ids_are_consecutive_within_a_block(tmp_path):
    manager = ProducerIdManager(FileBlockStore(str(tmp_path)), block_size=10)
    assert [manager.next_id() for _ in range(25)] == list(range(25))
    saved = json.loads((tmp_path / FILE_NAME).read_text())
    assert saved["block_start"] == 20 and saved["block_end"] == 29


def test_restart_resumes_after_the_reserved_block(tmp_path):
    first = ProducerIdManager(FileBlockStore(str(tmp_path)), block_size=10)
    ids = [first.next_id() for _ in range(3)]            # block 0..9 reserved
    second = ProducerIdManager(FileBlockStore(str(tmp_path)), block_size=10)
    more = [second.next_id() for _ in range(12)]
    assert more[0] == 10
    assert not set(ids) & set(more)
    assert len(set(more)) == 12
    third = ProducerIdManager(FileBlockStore(str(tmp_path)), block_size=10)
    assert third.next_id() == 30


def test_no_temporary_file_left(tmp_path):
    ProducerIdManager(FileBlockStore(str(tmp_path))).next_id()
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE_NAME]


def test_idle_producer_ids_expire(tmp_path):
    """producer.id.expiration.ms: the state of an idempotent producer whose last batch is older
    than the setting is dropped by the periodic check (Kafka's PeriodicProducerExpirationCheck,
    which compares the batch's max timestamp with the clock), so short-lived producers do not
    pile up; a producer that wrote recently stays."""
    import time
    from confluent_kafka import Producer
    from broker.embedded import EmbeddedBroker
    config = {"producer.id.expiration.ms": 60_000,
              "producer.id.expiration.check.interval.ms": 100}
    now_ms = int(time.time() * 1000)
    with EmbeddedBroker(config, topics={"t": 1}) as kafka:
        for timestamp in (now_ms - 120_000, now_ms - 90_000, now_ms - 61_000, now_ms):
            p = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                          "enable.idempotence": True})
            p.produce("t", b"x", timestamp=timestamp)
            assert p.flush(10) == 0
        producers = kafka.broker.replica_manager.get_partition("t", 0).log.producer_state \
            .manager.producers
        deadline = time.monotonic() + 10
        while len(producers) > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)                          # a few more checks: the recent one stays
        assert [e.last_timestamp for e in producers.values()] == [now_ms]
        assert [r.value for r in kafka.read_all("t")] == [b"x"] * 4


def test_producers_expired_while_down_are_not_loaded_back(tmp_path):
    """Kafka drops expired producers when it loads a snapshot: after a restart, a producer
    whose last batch is older than producer.id.expiration.ms is gone before the first check."""
    import time
    from confluent_kafka import Producer
    from broker.embedded import EmbeddedBroker
    config = {"producer.id.expiration.ms": 60_000,
              "producer.id.expiration.check.interval.ms": 3_600_000}
    now_ms = int(time.time() * 1000)

    def producers(kafka):
        return kafka.broker.replica_manager.get_partition("t", 0).log.producer_state \
            .manager.producers
    with EmbeddedBroker(config, topics={"t": 1}, data_dir=tmp_path / "d") as kafka:
        for timestamp in (now_ms - 120_000, now_ms):
            p = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                          "enable.idempotence": True})
            p.produce("t", b"x", timestamp=timestamp)
            assert p.flush(10) == 0
        assert len(producers(kafka)) == 2        # no check has run yet
    with EmbeddedBroker(config, data_dir=tmp_path / "d") as kafka:
        assert [e.last_timestamp for e in producers(kafka).values()] == [now_ms]
