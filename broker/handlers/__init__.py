"""The handler registry: one module per API, and the ApiVersions answer built from it.

Each module in `HANDLER_MODULES` defines API_KEY, MIN_VERSION, MAX_VERSION and
`async def handle(broker, ctx, request)`. `HANDLERS` maps api key -> module; ApiVersions
advertises exactly these keys and version ranges, so the answer cannot drift from what is served.
To add an API: write broker/handlers/<api>.py and add its name here (one line).
"""
import importlib

HANDLER_MODULES = [
    # broker core
    "api_versions",
    "metadata",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "describe_configs",
    "alter_configs",
    "incremental_alter_configs",
    "describe_cluster",
    "sasl_handshake", "sasl_authenticate",
    "describe_client_quotas", "alter_client_quotas", "describe_user_scram_credentials",
    "describe_acls", "create_acls", "delete_acls",
    "create_delegation_token", "renew_delegation_token", "expire_delegation_token",
    "describe_delegation_token",
    # group coordinator
    "find_coordinator", "join_group", "sync_group", "heartbeat", "leave_group", "offset_commit",
    "offset_fetch", "offset_delete", "describe_groups", "list_groups", "delete_groups",
    "txn_offset_commit",
    # data path
    "produce", "fetch", "list_offsets", "offset_for_leader_epoch", "delete_records",
    "describe_log_dirs", "init_producer_id",
    # cluster operations (at the controller)
    "elect_leaders", "alter_partition_reassignments", "list_partition_reassignments",
    "alter_replica_log_dirs",
    # transaction coordinator, and the partition side of transactions
    "add_partitions_to_txn", "add_offsets_to_txn", "end_txn", "describe_transactions",
    "list_transactions", "describe_producers", "write_txn_markers",
    # inter-broker: the controller's requests, and the ones brokers send the controller
    "leader_and_isr", "update_metadata", "stop_replica", "controlled_shutdown",
    "alter_partition",
]


def _load() -> dict:
    handlers = {}
    for name in HANDLER_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        if module.API_KEY in handlers:
            raise RuntimeError(f"two handlers for api key {module.API_KEY}: "
                               f"{handlers[module.API_KEY].__name__} and {module.__name__}")
        handlers[int(module.API_KEY)] = module
    return dict(sorted(handlers.items()))


HANDLERS = _load()
