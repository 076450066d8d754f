"""IncrementalAlterConfigs (api key 44), versions 0-1.

Behaviour: each config carries an operation applied to the resource's current overrides:
SET (0) a value, DELETE (1) the override (back to the inherited value), APPEND (2) / SUBTRACT (3)
items of a LIST config (starting from the resource's own value, else the config's default, as
Kafka's prepareIncrementalConfigs: not from a value inherited from the broker); APPEND/SUBTRACT
on a non-list config
-> INVALID_CONFIG; an unknown operation -> INVALID_REQUEST; a name twice -> INVALID_REQUEST.
The result is then stored exactly like AlterConfigs (same validation, persistence and live
application; see alter_configs.py). validate_only changes nothing.

BROKER_LOGGER (type 8, named by this broker's id): SET a logger's level (TRACE, DEBUG, INFO,
WARN, ERROR, FATAL, OFF), DELETE it (the logger inherits its parent's level again). As Kafka: an
unknown logger or level -> INVALID_CONFIG; DELETE of "root", APPEND or SUBTRACT ->
INVALID_REQUEST. Levels live in the process only (not persisted), like log4j's in Kafka.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsResponse

from broker import zk_data as zd
from broker.config import BROKER_CONFIG, TOPIC_CONFIG, format_value
from broker.handlers.alter_configs import (BROKER, TOPIC, alter_resource, broker_target,
                                           check_no_duplicates, check_no_nulls, check_topic_resource,
                                           repeated_resources)
from broker.handlers.describe_configs import BROKER_LOGGER, check_logger_resource
from broker.log import LEVELS, ROOT_LOGGER, logger_exists, set_logger_level

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
MIN_VERSION = 0
MAX_VERSION = 1

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def _current(broker, resource_type, resource_name) -> tuple:
    """(current overrides, table of definitions). In a cluster from ZooKeeper, as Kafka's
    ZkAdminManager (fetchEntityConfig): this broker's copy lags behind a change just made
    through another broker, and building on it would undo that change."""
    if resource_type == TOPIC:
        check_topic_resource(broker, resource_name)
        entity, cached, table = "topics", broker.metadata.topic_config(resource_name), \
            TOPIC_CONFIG
        name = resource_name
    elif resource_type == BROKER:
        target = broker_target(broker, resource_name)
        entity, cached, table = "brokers", broker.metadata.broker_config(target), BROKER_CONFIG
        name = zd.DEFAULT_ENTITY if target is None else str(target)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}")
    kzk = getattr(getattr(broker, "cluster", None), "kzk", None)
    if kzk is None:
        return cached, table
    try:
        return await kzk.get_entity_config(entity, name), table
    except zd.ZNodeDataError:
        return {}, table                        # a hand-edited znode: written over, as Kafka


def _apply(values, table, config):
    name, op, value = config.name, config.config_operation, config.value
    definition = table.get(name)
    if op == SET:
        values[name] = value
    elif op == DELETE:
        values.pop(name, None)
    elif op in (APPEND, SUBTRACT):
        if definition is None or definition.type != "list":
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Config value {'append' if op == APPEND else 'subtract'} is not "
                             f"allowed for config key: {name}")
        # Kafka's prepareIncrementalConfigs: from the resource's own value, else the config's
        # default (not a value inherited from the broker).
        current = values.get(name)
        items = [i.strip() for i in current.split(",") if i.strip()] if current is not None \
            else list(definition.default or [])
        changes = [i.strip() for i in (value or "").split(",") if i.strip()]
        if op == APPEND:
            items += [c for c in changes if c not in items]
        else:
            items = [i for i in items if i not in changes]
        values[name] = format_value(items)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")


def _alter_loggers(broker, resource, validate_only: bool) -> None:
    """Check every change first, then apply them all (nothing changes when one is refused)."""
    check_logger_resource(broker, resource.resource_name)
    changes = []
    for config in resource.configs:
        name, op = config.name, config.config_operation
        if op == SET:
            if not logger_exists(name):
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
            level = (config.value or "").strip().upper()
            if level not in LEVELS:
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"Cannot set the log level of {name} to {config.value} as it "
                                 f"is not a supported log level. Valid levels are "
                                 f"{', '.join(LEVELS)}")
            changes.append((name, level))
        elif op == DELETE:
            if name == ROOT_LOGGER:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Removing the log level of the root logger is not allowed")
            if not logger_exists(name):
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
            changes.append((name, None))
        elif op in (APPEND, SUBTRACT):
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"{'APPEND' if op == APPEND else 'SUBTRACT'} operation is not "
                             f"allowed for the BROKER_LOGGER resource")
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    if not validate_only:
        for name, level in changes:
            set_logger_level(name, level)


async def handle(broker, ctx, request):
    responses = []
    repeated = repeated_resources(request.resources)
    for resource in request.resources:
        result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name)
        responses.append(result)
        try:
            if (resource.resource_type, resource.resource_name) in repeated:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Each resource must appear at most once.")
            check_no_duplicates(c.name for c in resource.configs)
            check_no_nulls(c.name for c in resource.configs
                           if c.value is None and c.config_operation != DELETE)
            if resource.resource_type == BROKER_LOGGER:
                _alter_loggers(broker, resource, request.validate_only)
                continue
            values, table = await _current(broker, resource.resource_type,
                                           resource.resource_name)
            for config in resource.configs:
                _apply(values, table, config)
            await alter_resource(broker, resource.resource_type, resource.resource_name, values,
                           request.validate_only)
        except KafkaError as exc:
            result.error_code = exc.error_code
            result.error_message = exc.message
    return IncrementalAlterConfigsResponse(responses=responses)
