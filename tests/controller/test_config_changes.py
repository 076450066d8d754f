"""The /config/changes listener of broker/cluster.py's ClusterMembership over the in-memory
ZooKeeper: which notifications are applied, in which order, and how old ones are purged, as
Kafka's ZkNodeChangeNotificationListener."""
import asyncio
import sys
import pathlib
from types import SimpleNamespace

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from fake_zk import FakeZooKeeper  # noqa: E402

from broker import zk_data as zd  # noqa: E402
from broker.cluster import ClusterMembership  # noqa: E402
from broker.kafka_zk import CONFIG_CHANGE_EXPIRATION_MS, KafkaZk  # noqa: E402


class Clock:
    def __init__(self):
        self.now = 1_700_000_000_000

    def ms(self):
        return self.now


async def membership():
    server, clock = FakeZooKeeper(), Clock()
    server.now_ms = clock.ms
    kzk = KafkaZk(server.client())
    await kzk.create_top_level_paths()
    m = ClusterMembership(SimpleNamespace(config={}, time=clock))
    m.kzk = kzk
    applied = []

    async def apply(entity_path):
        applied.append(entity_path)
    m._apply_config_change = apply
    return server, clock, kzk, m, applied


def test_a_notification_that_could_not_be_read_is_read_again():
    """Kafka's listener marks a change done only once it was read: one read failing (a session
    expiring) left it skipped for good here."""
    async def scenario():
        server, clock, kzk, m, applied = await membership()
        await kzk.set_entity_config("topics", "t", {"retention.ms": "1"})
        real = kzk.read_config_change

        async def failing(name):
            raise zd.SessionExpiredError("session expired")
        kzk.read_config_change = failing
        await m._process_config_changes()
        assert applied == []
        kzk.read_config_change = real
        await m._process_config_changes()
        assert applied == ["topics/t"]
    asyncio.run(scenario())


def test_notifications_older_than_15_minutes_are_purged():
    """Kafka's purgeObsoleteNotifications: without it /config/changes grew for ever and every
    broker listed all of it on each change."""
    async def scenario():
        server, clock, kzk, m, applied = await membership()
        await kzk.set_entity_config("topics", "old", {"retention.ms": "1"})
        clock.now += CONFIG_CHANGE_EXPIRATION_MS + 1
        await kzk.set_entity_config("topics", "new", {"retention.ms": "2"})
        await m._process_config_changes()
        assert applied == ["topics/old", "topics/new"]
        left = await kzk.get_config_changes()
        assert len(left) == 1
        assert await kzk.read_config_change(left[0]) == "topics/new"
    asyncio.run(scenario())


def test_a_change_written_while_the_broker_reads_config_is_applied():
    """The notifications are listed before /config is read: one written in between is above
    the starting point and applied (it was taken as already read, and missed)."""
    async def scenario():
        server, clock, kzk, m, applied = await membership()
        await kzk.set_entity_config("topics", "t", {"retention.ms": "1"})

        class Store:
            async def load_from_zookeeper(self, kzk_):
                await kzk_.set_entity_config("topics", "t", {"retention.ms": "2"})
        await m.load_configs(Store())
        await m._process_config_changes()
        assert applied == ["topics/t"]
    asyncio.run(scenario())


def test_incremental_alter_configs_builds_on_zookeepers_copy_not_this_brokers():
    """Kafka's ZkAdminManager reads the current overrides from ZooKeeper: building on this
    broker's copy, which had not heard of a change just made through another broker yet,
    wrote that change away."""
    from broker.handlers.incremental_alter_configs import _current
    from broker.handlers.alter_configs import TOPIC, BROKER

    async def scenario():
        server, clock, kzk, m, applied = await membership()
        await kzk.set_entity_config("topics", "t", {"retention.ms": "1"})
        await kzk.set_entity_config("brokers", zd.DEFAULT_ENTITY, {"log.cleaner.threads": "2"})
        stale = SimpleNamespace(topic_config=lambda name: {}, broker_config=lambda b: {},
                                get_topic=lambda name: object())
        broker = SimpleNamespace(cluster=SimpleNamespace(kzk=kzk), metadata=stale, broker_id=0)
        topic, _ = await _current(broker, TOPIC, "t")
        default, _ = await _current(broker, BROKER, "")
        return topic, default
    topic, default = asyncio.run(scenario())
    assert topic == {"retention.ms": "1"} and default == {"log.cleaner.threads": "2"}


def test_a_malformed_user_client_quota_znode_is_skipped_at_start():
    """Kafka reads a hand-edited quota znode as empty: it stopped this broker's start-up."""
    from broker.metadata.cluster import ClusterMetadataStore

    async def scenario():
        server, clock, kzk, m, applied = await membership()
        await kzk.set_entity_config("users", "bob", {"producer_byte_rate": "1024"})
        await kzk.zk.create("/config/users/alice/clients/app", b"{not json", makepath=True)
        # Numbers Kafka's toLong refuses: a NaN or infinite bound failed every request after
        # its append (the throttle's arithmetic raised).
        await kzk.set_entity_config("users", "carol", {"producer_byte_rate": "nan",
                                                       "consumer_byte_rate": "1e400"})
        store = ClusterMetadataStore("cluster")
        await store.load_from_zookeeper(kzk)
        return store.client_quotas()
    quotas = asyncio.run(scenario())
    assert quotas == {(("user", "bob"),): {"producer_byte_rate": 1024.0}}


def test_quota_entity_names_are_sanitized_as_kafkas_url_encoder():
    from broker.metadata.cluster import quota_entity_path
    assert quota_entity_path((("client-id", "a~b c/d"),)) == ("clients", "a%7Eb%20c%2Fd")


def test_a_broker_id_that_is_no_java_int_is_skipped():
    """/brokers/ids/99999999999 (hand-made) was taken for a live broker: every UpdateMetadata
    then failed to encode and no broker learnt anything more."""
    async def scenario():
        server, clock, kzk, m, applied = await membership()
        info = zd.BrokerInfo(1, (zd.EndPoint("PLAINTEXT", "127.0.0.1", 9093, "PLAINTEXT"),),
                             None)
        for broker_id in (1, 99999999999):
            await kzk.zk.create(f"{zd.BROKER_IDS}/{broker_id}",
                                zd.encode_broker_info(info, clock.ms()), makepath=True)
        return await kzk.get_all_brokers()
    assert list(asyncio.run(scenario())) == [1]


def test_the_leader_epoch_wraps_as_a_java_int():
    """A hand-edited state at the largest epoch: the next one is Kafka's Int overflow, which
    still encodes (brokers ignore that partition as stale), not 2**31, which failed every
    controller request naming the partition."""
    state = zd.LeaderAndIsr(1, 2**31 - 1, [1, 2], 3)
    assert state.new_leader(2, [2], 4).leader_epoch == -2**31
    assert zd.next_leader_epoch(5) == 6
    decoded = zd.decode_partition_state("t", 0, zd.encode_partition_state(
        state.new_leader(2, [2], 4)))
    assert decoded.leader_epoch == -2**31
