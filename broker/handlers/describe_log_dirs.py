"""DescribeLogDirs (api key 35), versions 0-4.

Behaviour: one result per configured log dir (log.dirs), listing the partitions it holds with
partition_size (bytes of all its segments), offset_lag 0 and is_future_key false, plus the future
replica of a partition being moved to another dir (AlterReplicaLogDirs) with is_future_key true
and its offset_lag behind the current replica. topics null -> every
partition; otherwise only the partitions asked for (unknown ones are simply absent, as Kafka).
total_bytes / usable_bytes (v4+) come from statvfs of the dir. A dir that failed (an I/O error
took it offline, broker/replica_manager.py fail_log_dir) or cannot be read answers
KAFKA_STORAGE_ERROR for that dir.
"""
import os

from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.describe_log_dirs import DescribeLogDirsResponse

API_KEY = ApiKey.DESCRIBE_LOG_DIRS
MIN_VERSION = 0
MAX_VERSION = 4


def _wanted(request):
    if request.topics is None:
        return None
    return {(t.topic, p) for t in request.topics for p in t.partitions}


async def handle(broker, ctx, request):
    wanted = _wanted(request)
    Result = DescribeLogDirsResponse.DescribeLogDirsResult
    Topic = DescribeLogDirsResponse.DescribeLogDirsTopic
    Partition = DescribeLogDirsResponse.DescribeLogDirsPartition
    by_dir: dict[str, dict[str, list]] = {}
    log_dirs = [os.path.abspath(d) for d in broker.log_manager.log_dirs]
    for d in log_dirs:
        by_dir[d] = {}
    for part in broker.replica_manager.partitions():
        if wanted is not None and (part.topic, part.partition) not in wanted:
            continue
        parent = os.path.dirname(os.path.abspath(part.log.dir))
        topics = by_dir.setdefault(parent, {})
        topics.setdefault(part.topic, []).append(Partition(
            partition_index=part.partition, partition_size=part.log.size_in_bytes,
            offset_lag=0, is_future_key=False))
    # Replicas being moved between dirs (AlterReplicaLogDirs): the future log in its target
    # dir, with its lag behind the current one.
    for (topic, p), (log_dir, future) in list(broker.log_manager.future_logs.items()):
        part = broker.replica_manager.get_partition(topic, p)
        if part is None or (wanted is not None and (topic, p) not in wanted):
            continue
        by_dir.setdefault(log_dir, {}).setdefault(topic, []).append(Partition(
            partition_index=p, partition_size=future.size_in_bytes,
            offset_lag=max(0, part.log.log_end_offset - future.log_end_offset),
            is_future_key=True))
    results = []
    for log_dir, topics in by_dir.items():
        result = Result(error_code=0, log_dir=log_dir, total_bytes=-1, usable_bytes=-1,
                        topics=[Topic(name=name, partitions=sorted(
                            parts, key=lambda p: p.partition_index))
                            for name, parts in sorted(topics.items())])
        if log_dir in getattr(broker.log_manager, "offline_dirs", ()):
            result.error_code = ErrorCode.KAFKA_STORAGE_ERROR      # failed: see replica_manager
            results.append(result)
            continue
        try:
            stat = os.statvfs(log_dir)
            result.total_bytes = stat.f_blocks * stat.f_frsize
            result.usable_bytes = stat.f_bavail * stat.f_frsize
        except OSError:
            result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        results.append(result)
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)
