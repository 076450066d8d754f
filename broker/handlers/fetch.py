"""Fetch (api key 1), versions 0-17.

Behaviour:
- Long polling: the partitions are read once; if that gives fewer than min_bytes (capped at
  max_bytes) and nothing failed, diverged or was sent to a preferred read replica, the request
  waits in the fetch purgatory until appends make min_bytes readable, a partition's leader epoch
  moves from the one the request named, or max_wait_ms passes, then reads again. Other
  connections are never stalled: only this request's coroutine waits.
- Limits: max_bytes (at most the broker's fetch.max.bytes) for the whole response and
  partition_max_bytes per partition, except that the first partition with data returns at
  least one whole batch even if it exceeds both (Kafka's rule, so a consumer can never get
  stuck behind a big batch); a later partition whose first batch does not fit gets no records.
- isolation_level: read_uncommitted reads below the high watermark, read_committed below the last
  stable offset (no open transaction starts below it) and gets aborted_transactions: the
  (producer_id, first_offset) of every aborted transaction overlapping the returned records,
  from the segments' .txnindex files; null for read_uncommitted, as Kafka writes. Replica fetches (replica_id >= 0, from
  ReplicaState in v15+) read up to the log end offset and report the follower's position.
- Incremental fetch sessions (KIP-227, v7+): see broker/fetch_session.py. Session errors
  (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR) are
  top-level with no partitions; incremental responses carry only partitions with news.
- Topic ids from v13: an unknown id -> UNKNOWN_TOPIC_ID for its partitions; names before v13.
- Per partition: OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
  FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (current_leader_epoch, v9+), with high_watermark,
  last_stable_offset and log_start_offset filled in.
- Records are `FileRegion`s pointing into segment files; the connection sends them with sendfile
  (except for versions 0-3, below).
- Client quotas (consumers only, not replicas): max_bytes is capped at what the
  consumer_byte_rate quota allows in one window; a response that takes the client over its
  quota is answered empty with throttle_time_ms (its bytes are not counted), and the connection
  reads nothing more until that time has passed (Kafka's KIP-219 behaviour, for every version
  as Kafka 3.9: broker/connection.py).
- Versions 0-3 (clients before 0.11, and kafka-python told `api_version=(0, 10, 1)` or older)
  get their records down-converted to magic 0 (v0-1) or 1 (v2-3) as Kafka's
  maybeConvertFetchedData does (storage/legacy.py `convert_from_v2`): read into memory and
  converted on a worker thread, no more bytes than were read, control batches dropped, records
  below the fetch offset left out; UNSUPPORTED_VERSION for a topic with
  message.downconversion.enable=false, UNSUPPORTED_COMPRESSION_TYPE when the data starts with a
  zstd batch (the batches before one are sent). The first batch comes whole even for v0-2
  (Kafka's hard size limit there would send an old client a partial message it cannot use). Before
  v10 a consumer gets UNSUPPORTED_COMPRESSION_TYPE for a topic with compression.type=zstd, and
  up to v5 KAFKA_STORAGE_ERROR is answered NOT_LEADER_OR_FOLLOWER (which those clients retry),
  as Kafka does.
"""
import asyncio
import uuid

from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.fetch import FetchResponse

from storage.compression import CorruptRecordError
from storage.legacy import DownConversionUnsupported, convert_from_v2

from broker.fetch_session import INVALID_SESSION_ID, CachedPartition
from broker.partition import ReadResult, checked_isolation_level

API_KEY = ApiKey.FETCH
MIN_VERSION = 0
MAX_VERSION = 17
LAST_MAGIC_0_VERSION = 1          # Fetch v0-1 read magic 0 messages, v2-3 magic 1

ZERO_UUID = uuid.UUID(int=0)


def _replica_id(request, version: int) -> int:
    if version >= 15:
        state = request.replica_state
        return state.replica_id if state is not None else -1
    return request.replica_id


def _fetch_partitions(replica_manager, request, uses_topic_ids: bool):
    """The request's partitions as session entries, topic ids resolved to names."""
    partitions = []
    for topic in request.topics:
        if uses_topic_ids:
            topic_id, name = topic.topic_id, replica_manager.topic_name(topic.topic_id)
        else:
            topic_id, name = ZERO_UUID, topic.topic
        for p in topic.partitions:
            partitions.append(CachedPartition(
                topic_id, name, p.partition, p.fetch_offset, p.partition_max_bytes,
                p.current_leader_epoch, p.last_fetched_epoch, p.log_start_offset))
    return partitions


def _forgotten_keys(replica_manager, request, version: int, uses_topic_ids: bool):
    if version < 7:
        return []
    keys = []
    for topic in request.forgotten_topics_data:
        which = topic.topic_id if uses_topic_ids else topic.topic      # CachedPartition.key
        keys.extend((which, p) for p in topic.partitions)
    return keys


async def handle(broker, ctx, request):
    replica_manager = broker.replica_manager
    version = ctx.api_version
    uses_topic_ids = version >= 13
    replica_id = _replica_id(request, version)
    isolation_level = checked_isolation_level(request.isolation_level)
    fetch_partitions = _fetch_partitions(replica_manager, request, uses_topic_ids)

    if version >= 7:
        context = replica_manager.fetch_sessions.new_context(
            request.session_id, request.session_epoch, fetch_partitions,
            _forgotten_keys(replica_manager, request, version, uses_topic_ids), uses_topic_ids,
            privileged=replica_id >= 0)
    else:
        context = replica_manager.fetch_sessions.new_context(
            INVALID_SESSION_ID, -1, fetch_partitions, [], False)
    if context.error_code != ErrorCode.NONE:
        return FetchResponse(throttle_time_ms=0, error_code=int(context.error_code),
                             session_id=INVALID_SESSION_ID, responses=[])

    partitions = context.partitions
    if uses_topic_ids:
        # Kafka's maybeResolveUnknownName, on every request: a session's partition follows
        # what its topic id names now.
        for p in partitions:
            p.topic = replica_manager.topic_name(p.topic_id)
    quotas = getattr(broker, "quotas", None) if replica_id < 0 else None   # not replicas
    max_bytes = request.max_bytes
    config = getattr(broker, "config", None)      # (handler tests pass a bare namespace)
    if config is not None:
        max_bytes = min(max_bytes, config.get("fetch.max.bytes"))
    if quotas is not None and quotas.fetch.overrides:
        max_bytes = quotas.fetch_max_bytes(ctx, max_bytes)
    # Kafka's fetchMinBytes: never more than the response may hold.
    min_bytes = min(request.min_bytes, max_bytes)
    client_metadata = version >= 11 and replica_id < 0    # a follower may serve it (KIP-392)
    read_kwargs = dict(max_bytes=max_bytes, isolation_level=isolation_level,
                       replica_id=replica_id,
                       client_rack=(request.rack_id or None) if version >= 11 else None,
                       client_metadata=client_metadata,
                       listener=ctx.listener_name)
    results = replica_manager.read(partitions, **read_kwargs)
    if _must_wait(request, min_bytes, results):
        # Satisfied or not, answer with whatever is readable when the wait ends.
        await replica_manager.wait_for_fetch(
            partitions, min_bytes=min_bytes, max_wait_ms=request.max_wait_ms,
            isolation_level=isolation_level, replica_id=replica_id,
            client_metadata=client_metadata)
        # Kafka's readFromPurgatory: the follower's position was taken by the first read (a
        # second update could move it back, after a newer fetch from its other fetcher).
        results = replica_manager.read(partitions, update_fetch_state=False, **read_kwargs)

    if version < 10 and replica_id < 0:
        _refuse_zstd_topics(replica_manager, results)
    if quotas is not None and quotas.fetch.overrides:
        size = sum(r.records_size for r in results.values())
        ctx.throttle_time_ms = quotas.fetch_throttle(ctx, size, broker.time.ms())
        if ctx.throttle_time_ms > 0:
            return FetchResponse(throttle_time_ms=ctx.throttle_time_ms, error_code=0,
                                 session_id=context.session_id, responses=[])

    if version <= 3:        # after the client quota, as Kafka: a throttled fetch converts nothing
        await _down_convert(replica_manager, partitions, results, version, replica_id)
    quota = replica_manager.leader_quota if replica_id >= 0 else None
    if quota is not None:
        # Every throttled partition's bytes count, in sync or not (Kafka's
        # sizeOfThrottledPartitions).
        quota.record(sum(r.records_size for (t, p), r in results.items()
                         if r.records_size and quota.is_throttled(t, p)))
    keys = context.response_keys({p.key: results[(p.topic, p.partition)] for p in partitions})
    by_key = {p.key: p for p in partitions}
    response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=context.session_id,
                             responses=_topic_responses(keys, by_key, results, version,
                                                        isolation_level))
    if version >= 16:
        _add_leader_hints(broker, ctx, response, by_key)
    return response


def _add_leader_hints(broker, ctx, response, by_key) -> None:
    """KIP-951 (v16+): NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH partitions carry the leader
    this broker knows, and the response its endpoint."""
    hint_for = getattr(broker, "leader_hint", None)
    if hint_for is None:
        return
    endpoints = {}
    for topic in response.responses:
        name = topic.topic or broker.replica_manager.topic_name(topic.topic_id)
        for p in topic.partitions:
            if p.error_code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                    ErrorCode.FENCED_LEADER_EPOCH) or name is None:
                continue
            hint = hint_for(name, p.partition_index, ctx.listener_name)
            if hint is None:
                continue
            leader, epoch, (host, port, rack) = hint
            p.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=leader,
                                                              leader_epoch=epoch)
            endpoints[leader] = FetchResponse.NodeEndpoint(node_id=leader, host=host, port=port,
                                                           rack=rack)
    response.node_endpoints = [endpoints[k] for k in sorted(endpoints)]


def _refuse_zstd_topics(replica_manager, results) -> None:
    """Consumers of Fetch before v10 cannot read zstd: a topic with compression.type=zstd is
    UNSUPPORTED_COMPRESSION_TYPE for them, as Kafka's maybeConvertFetchedData answers."""
    for (topic, partition), result in results.items():
        part = replica_manager.get_partition(topic, partition) if topic is not None else None
        config = getattr(getattr(part, "log", None), "config", None)
        if result.error_code == ErrorCode.NONE and \
                getattr(config, "compression_type", None) == "zstd":
            results[(topic, partition)] = ReadResult(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, result.high_watermark,
                result.last_stable_offset, result.log_start_offset)


async def _down_convert(replica_manager, partitions, results, version, replica_id) -> None:
    """Fetch v0-3 read messages of magic 0 or 1: each partition's records are converted (Kafka's
    maybeConvertFetchedData), or refused when its topic has message.downconversion.enable=false
    (consumers only) or its data starts with zstd. The conversion (decompressing and
    compressing again, ~0.5 s per MiB of gzip) runs on a worker thread so other connections
    are served meanwhile, and stops once it has as many bytes as were read (Kafka's lazy
    conversion sends no more)."""
    magic = 0 if version <= LAST_MAGIC_0_VERSION else 1
    loop = asyncio.get_running_loop()
    for fp in partitions:
        key = (fp.topic, fp.partition)
        result = results.get(key)
        if result is None or result.error_code != ErrorCode.NONE:
            continue
        part = replica_manager.get_partition(*key)
        config = getattr(getattr(part, "log", None), "config", None)
        if replica_id < 0 and not getattr(config, "message_downconversion_enable", True):
            results[key] = ReadResult(ErrorCode.UNSUPPORTED_VERSION)
            continue
        records = result.records
        if records is None or not len(records):
            continue
        try:
            converted = await loop.run_in_executor(None, _convert, records, magic,
                                                   fp.fetch_offset)
        except CorruptRecordError:
            results[key] = ReadResult(ErrorCode.CORRUPT_MESSAGE)
            continue
        except DownConversionUnsupported:
            results[key] = ReadResult(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
            continue
        except OSError:             # the segment went meanwhile: the client asks again
            results[key] = ReadResult(ErrorCode.KAFKA_STORAGE_ERROR)
            continue
        converted_result = ReadResult(ErrorCode.NONE, result.high_watermark,
                                      result.last_stable_offset, result.log_start_offset,
                                      converted)
        converted_result.aborted_transactions = result.aborted_transactions
        results[key] = converted_result


def _convert(records, magic: int, fetch_offset: int) -> bytes:
    data = records.read_bytes() if hasattr(records, "read_bytes") else bytes(records)
    return convert_from_v2(data, magic, fetch_offset, max_bytes=len(data))


def _must_wait(request, min_bytes, results) -> bool:
    """Kafka answers at once when max_wait_ms <= 0, no partitions, an error, a diverging epoch
    (the fetcher must truncate), a preferred read replica (the consumer goes there), or enough
    bytes (ReplicaManager.fetchMessages)."""
    if request.max_wait_ms <= 0 or not results:
        return False
    total = 0
    for result in results.values():
        if result.error_code != ErrorCode.NONE or result.diverging_epoch is not None or \
                getattr(result, "preferred_read_replica", -1) >= 0:
            return False
        total += result.records_size
    return total < min_bytes


def _topic_responses(keys, by_key, results, version, isolation_level):
    Topic = FetchResponse.FetchableTopicResponse
    Partition = FetchResponse.PartitionData
    Aborted = FetchResponse.AbortedTransaction
    topics = []
    current = None
    current_key = None
    for key in keys:
        fp = by_key[key]
        topic_key = (fp.topic_id, fp.topic)
        if topic_key != current_key:
            current_key = topic_key
            current = Topic(topic=fp.topic or "", topic_id=fp.topic_id, partitions=[])
            topics.append(current)
        result = results[(fp.topic, fp.partition)]
        diverging = None
        if result.diverging_epoch is not None and version >= 12:
            diverging = FetchResponse.EpochEndOffset(epoch=result.diverging_epoch[0],
                                                     end_offset=result.diverging_epoch[1])
        error_code = result.error_code
        if error_code == ErrorCode.KAFKA_STORAGE_ERROR and version <= 5:
            # Kafka's maybeDownConvertStorageError: clients of v5 and older do not know it as
            # retriable; NOT_LEADER_OR_FOLLOWER makes them refresh their metadata and retry.
            error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        current.partitions.append(Partition(
            partition_index=fp.partition,
            error_code=int(error_code),
            high_watermark=result.high_watermark,
            last_stable_offset=result.last_stable_offset,
            log_start_offset=result.log_start_offset,
            aborted_transactions=(None if isolation_level != 1 else [
                Aborted(producer_id=pid, first_offset=first)
                for pid, first in result.aborted_transactions or ()]),
            preferred_read_replica=result.preferred_read_replica,
            diverging_epoch=diverging,
            records=result.records if result.records is not None else b""))
    return topics
