"""AlterReplicaLogDirs (api key 34), v0-2: move replicas of this broker to another of its log
dirs (`kafka-reassign-partitions.sh` with "log_dirs", Admin.alterReplicaLogDirs), as Kafka's
ReplicaManager.alterReplicaLogDirs.

Per partition: LOG_DIR_NOT_FOUND for a path that is not one of log.dirs, KAFKA_STORAGE_ERROR for
a failed dir or partition, REPLICA_NOT_AVAILABLE for a partition this broker does not host yet
(it will be created in that dir when it arrives), else NONE: the move runs in the background
(broker/log_dir_mover.py) and DescribeLogDirs shows its future replica until it completes.
"""
from protocol.messages.alter_replica_log_dirs import (AlterReplicaLogDirsRequest,
                                                      AlterReplicaLogDirsResponse)

API_KEY = 34
MIN_VERSION = 0
MAX_VERSION = 2

R = AlterReplicaLogDirsResponse


async def handle(broker, ctx, request: AlterReplicaLogDirsRequest) -> R:
    wanted = {(t.name, p): d.path for d in request.dirs for t in d.topics for p in t.partitions}
    results = broker.replica_manager.alter_replica_log_dirs(wanted)
    by_topic: dict = {}
    for (topic, p), code in results.items():
        by_topic.setdefault(topic, []).append(R.AlterReplicaLogDirPartitionResult(
            partition_index=p, error_code=code))
    return R(throttle_time_ms=0, results=[R.AlterReplicaLogDirTopicResult(
        topic_name=t, partitions=ps) for t, ps in by_topic.items()])
