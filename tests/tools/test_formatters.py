"""The __consumer_offsets / __transaction_state formatters on records encoded with protocol.internal,
checked against the strings Kafka 3.x prints (offline: no broker)."""
from protocol.internal import (GroupMetadataKey, GroupMetadataValue, OffsetCommitKey, OffsetCommitValue,
                               TransactionLogKey, TransactionLogValue)
from protocol.internal_records import encode_key, encode_value

from broker.client.consumer_protocol import encode_assignment
from broker.tools import formatters


def test_offsets_formatter():
    key = encode_key(OffsetCommitKey(group="g", topic="t", partition=2))
    v3 = encode_value(OffsetCommitValue(offset=7, leader_epoch=4, metadata="m", commit_timestamp=123), 3)
    assert formatters.format_offsets(key, v3) == ("[g,t,2]::OffsetAndMetadata(offset=7, leaderEpoch=Optional[4], "
                                                  "metadata=m, commitTimestamp=123, expireTimestamp=None)")
    v1 = encode_value(OffsetCommitValue(offset=7, metadata="", commit_timestamp=123, expire_timestamp=999), 1)
    assert formatters.format_offsets(key, v1) == ("[g,t,2]::OffsetAndMetadata(offset=7, leaderEpoch=Optional.empty, "
                                                  "metadata=, commitTimestamp=123, expireTimestamp=Some(999))")
    assert formatters.format_offsets(key, None) == "[g,t,2]::NULL"
    group_key = encode_key(GroupMetadataKey(group="g"))
    assert formatters.format_offsets(group_key, None) is None        # other record types are skipped
    assert formatters.internal_formatter(
        "kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter") is formatters.format_offsets


def test_group_metadata_formatters():
    M = GroupMetadataValue.MemberMetadata
    value = encode_value(GroupMetadataValue(
        protocol_type="consumer", generation=3, protocol="range", leader="m1", current_state_timestamp=5,
        members=[M(member_id="m1", client_id="c", client_host="/127.0.0.1", rebalance_timeout=300000,
                   session_timeout=45000, subscription=b"", assignment=encode_assignment([("t", 0), ("t", 1)]))]), 3)
    key = encode_key(GroupMetadataKey(group="g"))
    assert formatters.format_group_metadata(key, value) == (
        "g::GroupMetadata(groupId=g, generation=3, protocolType=Some(consumer), currentState=Stable, "
        "members=HashMap(m1 -> MemberMetadata(memberId=m1, groupInstanceId=None, clientId=c, clientHost=/127.0.0.1, "
        "sessionTimeoutMs=45000, rebalanceTimeoutMs=300000, supportedProtocols=List(range))))")
    assert formatters.dump_offsets_record(0, key, value) == (      # Kafka 3.9's JSON
        '{"type":"2","data":{"group":"g"}}',
        '{"version":"3","data":{"protocolType":"consumer","generation":3,"protocol":"range","leader":"m1",'
        '"currentStateTimestamp":5,"members":[{"memberId":"m1","groupInstanceId":null,"clientId":"c",'
        '"clientHost":"/127.0.0.1","rebalanceTimeout":300000,"sessionTimeout":45000,"subscription":"",'
        '"assignment":{"assignedPartitions":[{"topic":"t","partitions":[0,1]}],"userData":null}}]}}')
    assert formatters.format_group_metadata(key, None) == "g::NULL"


def test_transaction_log_formatter():
    P = TransactionLogValue.PartitionsSchema
    key = encode_key(TransactionLogKey(transactional_id="tx"))
    value = encode_value(TransactionLogValue(
        producer_id=5, producer_epoch=1, transaction_timeout_ms=60000, transaction_status=4,
        transaction_partitions=[P(topic="b", partition_ids=[0]), P(topic="a", partition_ids=[1])],
        transaction_last_update_timestamp_ms=20, transaction_start_timestamp_ms=10), 0)
    assert formatters.format_transaction_log(key, value) == (
        "tx::TransactionMetadata(transactionalId=tx, producerId=5, lastProducerId=-1, producerEpoch=1, "
        "lastProducerEpoch=-1, txnTimeoutMs=60000, state=CompleteCommit, pendingState=None, "
        "topicPartitions=HashSet(a-1, b-0), txnStartTimestamp=10, txnLastUpdateTimestamp=20)")
    assert formatters.format_transaction_log(key, None) == "tx::NULL"
    assert formatters.dump_transaction_record(0, key, None) == ("transaction_metadata::transactionalId=tx",
                                                                "<DELETE>")
    # Kafka prints them as its Scala HashSet iterates, in hash order: not sorted for this topic
    # (kafka-transactions.sh describe lists the same order)
    value = encode_value(TransactionLogValue(
        producer_id=5, producer_epoch=1, transaction_timeout_ms=60000, transaction_status=1,
        transaction_partitions=[P(topic="txn-t", partition_ids=list(range(6)))],
        transaction_last_update_timestamp_ms=20, transaction_start_timestamp_ms=10), 0)
    assert formatters.dump_transaction_record(0, key, value)[1] == (
        "producerId:5,producerEpoch:1,state=Ongoing,partitions=[txn-t-4,txn-t-3,txn-t-5,txn-t-0,txn-t-2,"
        "txn-t-1],txnLastUpdateTimestamp=20,txnTimeoutMs=60000")


# -- Kafka 3.9's JSON formatters (ApiMessageFormatter), with the cases of its own tests --------------

def _versioned(version: int, message) -> bytes:
    """Kafka's MessageUtil.toVersionPrefixedByteBuffer; a version the message lacks gets the
    bytes of its newest one (the formatter must not read them)."""
    known = min(max(version, message.MIN_VERSION), message.MAX_VERSION)
    return version.to_bytes(2, "big", signed=True) + message.encode(known)


def _json(name, key, value):
    return formatters.internal_formatter(f"org.apache.kafka.tools.consumer.{name}")(key, value)


COMMIT_KEY = OffsetCommitKey(group="group-id", topic="foo", partition=1)
COMMIT_VALUE = OffsetCommitValue(offset=100, leader_epoch=10, metadata="metadata", commit_timestamp=1234,
                                 expire_timestamp=-1)
GROUP_KEY = GroupMetadataKey(group="group-id")


def test_offsets_json_formatter_as_kafka_3_9():
    key0 = '{"key":{"version":0,"data":{"group":"group-id","topic":"foo","partition":1}},'
    cases = [
        (10, 10, '{"key":{"version":10,"data":"unknown"},"value":{"version":10,"data":"unknown"}}'),
        (0, 0, key0 + '"value":{"version":0,"data":{"offset":100,"metadata":"metadata","commitTimestamp":1234}}}'),
        (0, 1, key0 + '"value":{"version":1,"data":{"offset":100,"metadata":"metadata","commitTimestamp":1234,'
                      '"expireTimestamp":-1}}}'),
        (0, 2, key0 + '"value":{"version":2,"data":{"offset":100,"metadata":"metadata","commitTimestamp":1234}}}'),
        (0, 3, key0 + '"value":{"version":3,"data":{"offset":100,"leaderEpoch":10,"metadata":"metadata",'
                      '"commitTimestamp":1234}}}'),
        (0, 4, key0 + '"value":{"version":4,"data":{"offset":100,"leaderEpoch":10,"metadata":"metadata",'
                      '"commitTimestamp":1234}}}'),
        (5, 4, '{"key":{"version":5,"data":"unknown"},"value":{"version":4,"data":{"offset":100,'
               '"leaderEpoch":10,"metadata":"metadata","commitTimestamp":1234}}}'),
        (0, 5, key0 + '"value":{"version":5,"data":"unknown"}}'),
    ]
    for kv, vv, expected in cases:
        assert _json("OffsetsMessageFormatter", _versioned(kv, COMMIT_KEY), _versioned(vv, COMMIT_VALUE)) \
            == expected, (kv, vv)
    assert _json("OffsetsMessageFormatter", _versioned(0, COMMIT_KEY), None) == key0 + '"value":null}'
    assert _json("OffsetsMessageFormatter", None, None) == '{"key":null,"value":null}'
    group_value = GroupMetadataValue(protocol_type="consumer", generation=1, protocol="range", leader="leader",
                                     members=[])
    assert _json("OffsetsMessageFormatter", _versioned(2, GROUP_KEY), _versioned(2, group_value)) is None


def test_group_and_transaction_json_formatters_as_kafka_3_9():
    member = GroupMetadataValue.MemberMetadata(
        member_id="member-1", client_id="client-1", client_host="host-1", rebalance_timeout=1000,
        session_timeout=1500, group_instance_id="group-instance-1", subscription=b"\x00\x01",
        assignment=b"\x01\x02")
    value = GroupMetadataValue(protocol_type="consumer", generation=1, protocol="range", leader="leader",
                               members=[member], current_state_timestamp=1234)
    assert _json("GroupMetadataMessageFormatter", _versioned(2, GROUP_KEY), _versioned(3, value)) == (
        '{"key":{"version":2,"data":{"group":"group-id"}},"value":{"version":3,"data":{"protocolType":"consumer",'
        '"generation":1,"protocol":"range","leader":"leader","currentStateTimestamp":1234,"members":[{'
        '"memberId":"member-1","groupInstanceId":"group-instance-1","clientId":"client-1","clientHost":"host-1",'
        '"rebalanceTimeout":1000,"sessionTimeout":1500,"subscription":"AAE=","assignment":"AQI="}]}}}')
    assert _json("GroupMetadataMessageFormatter", _versioned(2, GROUP_KEY), _versioned(0, value)) == (
        '{"key":{"version":2,"data":{"group":"group-id"}},"value":{"version":0,"data":{"protocolType":"consumer",'
        '"generation":1,"protocol":"range","leader":"leader","members":[{"memberId":"member-1",'
        '"clientId":"client-1","clientHost":"host-1","sessionTimeout":1500,"subscription":"AAE=",'
        '"assignment":"AQI="}]}}}')
    assert _json("GroupMetadataMessageFormatter", _versioned(0, COMMIT_KEY), _versioned(4, COMMIT_VALUE)) is None

    txn_key = TransactionLogKey(transactional_id="TXNID")
    txn_value = TransactionLogValue(producer_id=100, producer_epoch=50, transaction_status=4,
                                    transaction_start_timestamp_ms=750, transaction_last_update_timestamp_ms=1000,
                                    transaction_timeout_ms=500, transaction_partitions=[])
    data = ('{"producerId":100,"producerEpoch":50,"transactionTimeoutMs":500,"transactionStatus":4,'
            '"transactionPartitions":[],"transactionLastUpdateTimestampMs":1000,"transactionStartTimestampMs":750}')
    assert _json("TransactionLogMessageFormatter", _versioned(0, txn_key), _versioned(1, txn_value)) == (
        '{"key":{"version":0,"data":{"transactionalId":"TXNID"}},"value":{"version":1,"data":' + data + '}}')
    assert _json("TransactionLogMessageFormatter", _versioned(1, txn_key), _versioned(1, txn_value)) == (
        '{"key":{"version":1,"data":"unknown"},"value":{"version":1,"data":' + data + '}}')
    assert _json("TransactionLogMessageFormatter", _versioned(0, txn_key), _versioned(5, txn_value)) == (
        '{"key":{"version":0,"data":{"transactionalId":"TXNID"}},"value":{"version":5,"data":"unknown"}}')
