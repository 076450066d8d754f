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
