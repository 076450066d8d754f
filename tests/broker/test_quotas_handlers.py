"""Describe/AlterClientQuotas over real sockets against an in-process broker: validation as Kafka,
filters, persistence across a restart, and throttle_time_ms on Produce and Fetch."""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.describe_client_quotas import DescribeClientQuotasRequest
from protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from protocol.messages.fetch import FetchRequest
from protocol.messages.produce import ProduceRequest
from storage.record_batch import RecordBatchBuilder

from broker.config import BrokerConfig
from broker.server import Broker
from tests.broker.conftest import RawClient

A = AlterClientQuotasRequest
D = DescribeClientQuotasRequest
INVALID = ErrorCode.INVALID_REQUEST


def entry(entity: dict, **ops):
    """entry({"user": "alice"}, producer_byte_rate=1024, consumer_byte_rate=None) (None = remove)."""
    return A.EntryData(entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
                       ops=[A.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                            for k, v in ops.items()])


async def alter(client, *entries, validate_only=False, version=1):
    response = await client.request(A(entries=list(entries), validate_only=validate_only), version)
    return [(e.error_code, e.error_message) for e in response.entries]


async def describe(client, *components, strict=False, version=1):
    """components: (entity type, match type, match); -> (error, {entity tuple: {key: value}})."""
    response = await client.request(D(strict=strict, components=[
        D.ComponentData(entity_type=t, match_type=m, match=name) for t, m, name in components]), version)
    found = {tuple(sorted((e.entity_type, e.entity_name) for e in x.entity)):
             {v.key: v.value for v in x.values} for x in response.entries or []}
    return (response.error_code, response.error_message), found


async def test_api_versions_advertise_the_quota_apis(client):
    response = await client.request(ApiVersionsRequest(), 0)
    keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert keys[ApiKey.DESCRIBE_CLIENT_QUOTAS] == (0, 1)
    assert keys[ApiKey.ALTER_CLIENT_QUOTAS] == (0, 1)


async def test_no_scram_credentials_are_described(client):
    """Apache Kafka's kafka-configs.sh asks for them while describing users; none exist here."""
    S = DescribeUserScramCredentialsRequest
    assert keys_of(await client.request(ApiVersionsRequest(), 0))[50] == (0, 0)
    response = await client.request(S(users=None), 0)
    assert (response.error_code, response.results) == (0, [])
    response = await client.request(S(users=[S.UserName(name=n) for n in ("alice", "bob", "alice")]), 0)
    assert [(r.user, r.error_code, r.error_message) for r in response.results] == [
        ("alice", ErrorCode.DUPLICATE_RESOURCE,
         "Cannot describe SCRAM credentials for the same user twice in a single request: alice"),
        ("bob", ErrorCode.RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist: bob")]


def keys_of(api_versions) -> dict:
    return {k.api_key: (k.min_version, k.max_version) for k in api_versions.api_keys}


async def test_alter_then_describe_with_filters(client):
    assert await alter(client,
                       entry({"user": "alice"}, producer_byte_rate=1024),
                       entry({"user": "alice", "client-id": "c1"}, consumer_byte_rate=2048),
                       entry({"user": None}, request_percentage=12.5),
                       entry({"client-id": None}, producer_byte_rate=100),
                       entry({"ip": "127.0.0.1"}, connection_creation_rate=10),
                       version=0) == [(0, None)] * 5
    alice = (("user", "alice"),)
    alice_c1 = (("client-id", "c1"), ("user", "alice"))
    # exact user, not strict: alice and alice's client entity
    _, found = await describe(client, ("user", 0, "alice"))
    assert found == {alice: {"producer_byte_rate": 1024.0}, alice_c1: {"consumer_byte_rate": 2048.0}}
    # strict: only the user entity
    _, found = await describe(client, ("user", 0, "alice"), strict=True)
    assert found == {alice: {"producer_byte_rate": 1024.0}}
    # any user, strict: alice and the default user
    _, found = await describe(client, ("user", 2, None), strict=True)
    assert set(found) == {alice, (("user", None),)}
    # default client-id only
    _, found = await describe(client, ("client-id", 1, None), strict=True)
    assert found == {(("client-id", None),): {"producer_byte_rate": 100.0}}
    # user + any client
    _, found = await describe(client, ("user", 0, "alice"), ("client-id", 2, None), strict=True)
    assert list(found) == [alice_c1]
    _, found = await describe(client, ("ip", 2, None))
    assert found == {(("ip", "127.0.0.1"),): {"connection_creation_rate": 10.0}}
    # no components: everything unless strict
    _, found = await describe(client, version=0)
    assert len(found) == 5
    assert (await describe(client, strict=True))[1] == {}


async def test_remove_keys_and_entities(client):
    await alter(client, entry({"client-id": "c9"}, producer_byte_rate=10, consumer_byte_rate=20))
    assert await alter(client, entry({"client-id": "c9"}, producer_byte_rate=None,
                                     request_percentage=None)) == [(0, None)]   # absent key: fine
    assert (await describe(client, ("client-id", 0, "c9")))[1] == {
        (("client-id", "c9"),): {"consumer_byte_rate": 20.0}}
    await alter(client, entry({"client-id": "c9"}, consumer_byte_rate=None))
    assert (await describe(client, ("client-id", 0, "c9")))[1] == {}


async def test_alter_errors_are_per_entry(client):
    results = await alter(
        client,
        entry({}, producer_byte_rate=1),
        entry({"group": "g"}, producer_byte_rate=1),
        entry({"user": ""}, producer_byte_rate=1),
        entry({"ip": "10.0.0.1", "user": "a"}, connection_creation_rate=1),
        entry({"ip": "no.such.host.invalid"}, connection_creation_rate=1),
        entry({"user": "a"}, bogus=1),
        entry({"user": "a"}, connection_creation_rate=1),
        entry({"ip": None}, producer_byte_rate=1),
        entry({"user": "a"}, producer_byte_rate=0),
        entry({"client-id": "c"}, consumer_byte_rate=-1),
        entry({"client-id": "c"}, producer_byte_rate=1.5),
        entry({"client-id": "ok"}, producer_byte_rate=5))
    assert [code for code, _ in results] == [INVALID] * 11 + [0]
    messages = [m for _, m in results]
    assert messages[0] == "Invalid empty client quota entity"
    assert messages[1] == "Unhandled client quota entity type: group"
    assert messages[2] == "Empty user not supported"
    assert "IP entity should not be combined with User or ClientId entity" in messages[3]
    assert messages[4] == "Unknown host: no.such.host.invalid"
    assert messages[5] == "Invalid configuration key bogus"
    assert messages[6] == "Invalid configuration key connection_creation_rate"
    assert messages[7] == "Invalid configuration key producer_byte_rate"
    assert messages[8] == "Quota producer_byte_rate must be greater than 0"
    assert messages[9] == "Quota consumer_byte_rate must be greater than 0"
    assert messages[10] == "producer_byte_rate cannot be a fractional value."
    # only the valid entry was applied
    _, found = await describe(client)
    assert found == {(("client-id", "ok"),): {"producer_byte_rate": 5.0}}
    # a key twice in one entry
    dup = A.EntryData(entity=[A.EntityData(entity_type="user", entity_name="a")],
                      ops=[A.OpData(key="producer_byte_rate", value=1.0),
                           A.OpData(key="producer_byte_rate", value=2.0)])
    [(code, message)] = await alter(client, dup)
    assert code == INVALID and "Duplicate quota key producer_byte_rate" in message


async def test_validate_only_changes_nothing(client):
    assert await alter(client, entry({"user": "v"}, producer_byte_rate=1),
                       validate_only=True) == [(0, None)]
    assert (await describe(client))[1] == {}
    [(code, _)] = await alter(client, entry({"user": "v"}, producer_byte_rate=-1),
                              validate_only=True)
    assert code == INVALID


async def test_describe_filter_errors(client):
    cases = [
        ([("", 0, "x")], INVALID, "Invalid empty entity type."),
        ([("user", 0, "a"), ("user", 2, None)], INVALID,
         "Entity type user cannot appear more than once in the filter."),
        ([("group", 2, None)], ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group"),
        ([("user", 0, None)], INVALID, "Request specified MATCH_TYPE_EXACT, but set match string "
                                       "to null."),
        ([("user", 1, "a")], INVALID, "Request specified MATCH_TYPE_DEFAULT, but also specified a "
                                      "match string."),
        ([("user", 2, "a")], INVALID, "Request specified MATCH_TYPE_SPECIFIED, but also specified "
                                      "a match string."),
        ([("user", 7, None)], INVALID, "Unknown match type 7"),
        ([("ip", 2, None), ("client-id", 0, "c")], INVALID,
         "Invalid entity filter component combination. IP filter component should not be used "
         "with user or clientId filter component."),
    ]
    for components, code, message in cases:
        error, found = await describe(client, *components)
        assert error == (code, message) and found == {}


async def test_quotas_survive_a_restart(tmp_path):
    props = {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
             "log.dirs": str(tmp_path / "logs")}
    broker = Broker(BrokerConfig(dict(props)))
    await broker.start()
    try:
        c = await RawClient.connect(broker.port)
        await alter(c, entry({"user": "alice", "client-id": None}, producer_byte_rate=1024),
                    entry({"ip": None}, connection_creation_rate=3))
        await c.close()
    finally:
        await broker.shutdown()
    broker = Broker(BrokerConfig(dict(props)))
    await broker.start()
    try:
        c = await RawClient.connect(broker.port)
        _, found = await describe(c)
        assert found == {(("client-id", None), ("user", "alice")): {"producer_byte_rate": 1024.0},
                         (("ip", None),): {"connection_creation_rate": 3.0}}
        assert broker.quotas.produce.resolve("alice", "x") == (("alice", "x"), 1024.0)
        await c.close()
    finally:
        await broker.shutdown()


# -- enforcement -------------------------------------------------------------------------------

def records(size: int) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(1_700_000_000_000, b"k", b"x" * size)
    return builder.build()


def produce(topic: str, size: int, acks=1):
    return ProduceRequest(acks=acks, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0,
                                                                        records=records(size))])])


async def request_as(client, message, version, client_id):
    correlation_id = client.send(message, version, client_id=client_id)
    got, response = await client.receive(message.API_KEY, version)
    assert got == correlation_id
    return response


async def create_topic(client, name):
    CT = CreateTopicsRequest
    response = await client.request(CT(topics=[CT.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1)], timeout_ms=1000), 5)
    assert response.topics[0].error_code == 0


async def test_produce_over_the_client_quota_is_throttled(broker, client):
    await create_topic(client, "q")
    assert await alter(client, entry({"client-id": "slow"}, producer_byte_rate=1000)) == [(0, None)]
    # 4 KB requests against 1000 B/s over the 10 s minimum window: the third crosses 10 KB
    throttles = [(await request_as(client, produce("q", 4000), 9, "slow")).throttle_time_ms
                 for _ in range(3)]
    assert throttles[:2] == [0, 0] and throttles[2] > 0
    # the throttled connection is muted (reads nothing more) for that long
    loop_time = broker.loop.time()
    assert [c._muted_until > loop_time for c in broker.connections.connections] == [True]
    other = await RawClient.connect(broker.port)
    response = await request_as(other, produce("q", 4000), 9, "fast")    # no quota for "fast"
    await other.close()
    assert response.throttle_time_ms == 0
    assert response.responses[0].partition_responses[0].error_code == 0


async def test_an_old_producer_is_answered_at_once_and_then_muted(broker, client):
    """Produce v5 predates KIP-219, but Kafka (>= 2.0) sends every response at once and mutes
    the connection whatever the version: the old client waits on its next request."""
    await create_topic(client, "old")
    await alter(client, entry({"client-id": "old-client"}, producer_byte_rate=50000))
    response = await request_as(client, produce("old", 510_000), 5, "old-client")
    assert response.throttle_time_ms > 0          # ~200 ms: (51000 - 50000) / 50000 * 10 s
    loop_time = broker.loop.time()
    assert [c._muted_until > loop_time for c in broker.connections.connections] == [True]


async def test_the_anonymous_user_quota_applies_and_fetch_answers_empty(client):
    await create_topic(client, "f")
    for _ in range(4):
        await request_as(client, produce("f", 5000), 9, "producer")
    assert await alter(client, entry({"user": "ANONYMOUS"}, consumer_byte_rate=800)) == [(0, None)]
    F = FetchRequest

    def fetch():
        return F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                 session_id=0, session_epoch=-1, topics=[F.FetchTopic(topic="f", partitions=[
                     F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                 forgotten_topics_data=[], rack_id="")
    # the quota caps a fetch at 10 windows' worth (8000 B): one ~5 KB batch, 500 B/s over 10 s
    first = await request_as(client, fetch(), 11, "consumer")
    assert first.throttle_time_ms == 0
    assert len(first.responses[0].partitions[0].records) > 0
    # the next one takes the rate to ~1000 B/s: answered empty, with the throttle time
    second = await request_as(client, fetch(), 11, "consumer")
    assert second.throttle_time_ms > 0 and second.responses == []
