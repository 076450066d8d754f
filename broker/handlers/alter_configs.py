"""AlterConfigs (api key 33), versions 0-2.

Behaviour: for each resource, the given configs REPLACE the whole set of overrides (configs not
listed return to their inherited value), as Kafka's legacy AlterConfigs does.
- TOPIC (2): names/values checked against the topic config table (INVALID_CONFIG); unknown topic
  -> UNKNOWN_TOPIC_OR_PARTITION. Stored in the metadata store and applied to the live logs.
- BROKER (4): name "" = the cluster-wide default, this broker's id = this broker; other ids ->
  INVALID_REQUEST. Only dynamic broker configs may change (else INVALID_REQUEST); bad values ->
  INVALID_REQUEST too, as Kafka's ConfigAdminManager (KAFKA-13609). Persisted, applied to the
  live config, and pushed to every log (topic configs inherit from their broker synonyms).
- BROKER_LOGGER (8): INVALID_REQUEST, as Kafka (logger levels change through
  IncrementalAlterConfigs only).
- validate_only: run every check, change nothing.

`set_topic_overrides` and `set_broker_overrides` are shared with IncrementalAlterConfigs.
"""
import logging


from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.alter_configs import AlterConfigsResponse

from broker.config import BROKER_CONFIG, ConfigError, deprecation_warnings, java_int

log = logging.getLogger(__name__)

API_KEY = ApiKey.ALTER_CONFIGS
MIN_VERSION = 0
MAX_VERSION = 2

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8


def check_no_duplicates(names) -> None:
    names = list(names)
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")


def check_no_nulls(names) -> None:
    """Kafka's ConfigAdminManager.preprocess: a null value (other than DELETE's) is refused."""
    names = list(names)
    if names:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         "Null value not supported for : " + ", ".join(names))


def repeated_resources(resources) -> set:
    """(type, name) of the resources named more than once: Kafka answers each of them
    INVALID_REQUEST "Each resource must appear at most once." and changes nothing."""
    seen, repeated = set(), set()
    for r in resources:
        key = (r.resource_type, r.resource_name)
        (repeated if key in seen else seen).add(key)
    return repeated


def broker_target(broker, resource_name: str):
    """None for the cluster default, else this broker's id, as Kafka's ConfigAdminManager
    .validateResourceNameIsCurrentNodeId reads it (a Java int: "01" is 1); INVALID_REQUEST
    otherwise."""
    if resource_name == "":
        return None
    node_id = java_int(resource_name)
    if node_id is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Node id must be an integer, but it is: {resource_name}")
    if node_id != broker.broker_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Unexpected broker id, expected {broker.broker_id}, but received "
                         f"{resource_name}")
    return broker.broker_id


def check_topic_resource(broker, name: str) -> None:
    """Kafka's ZkAdminManager.alterTopicConfigs: no default topic resource, and a name the
    metadata does not know (an illegal one too) is an unknown topic."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
    if broker.metadata.get_topic(name) is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")


async def set_topic_overrides(broker, name: str, overrides: dict, validate_only: bool) -> None:
    check_topic_resource(broker, name)
    await broker.topics.set_topic_configs_async(name, overrides, validate_only=validate_only)


async def set_broker_overrides(broker, resource_name: str, values: dict,
                               validate_only: bool) -> None:
    target = broker_target(broker, resource_name)
    for name in values:
        definition = BROKER_CONFIG.get(name)
        if definition is None or not definition.dynamic:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Cannot update these configs dynamically: {name}")
    try:
        broker.config.check_dynamic(values, cluster_default=target is None)
    except ConfigError as exc:
        # INVALID_REQUEST, not INVALID_CONFIG: Kafka's ConfigAdminManager.
        # validateBrokerConfigChange (KAFKA-13609 keeps it so for compatibility)
        raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    if validate_only:
        return
    await broker.metadata.write_broker_config(target, values)
    broker.config.set_dynamic(values, cluster_default=target is None)
    for warning in deprecation_warnings(values, broker.config.get("inter.broker.protocol.version")):
        log.warning(warning)
    broker.topics.apply_log_configs()
    reconfigure = getattr(broker, "reconfigure_cleaner", None)
    if reconfigure is not None:
        await reconfigure()


async def alter_resource(broker, resource_type: int, resource_name: str, values: dict,
                         validate_only: bool) -> None:
    if resource_type == TOPIC:
        await set_topic_overrides(broker, resource_name, values, validate_only)
    elif resource_type == BROKER:
        await set_broker_overrides(broker, resource_name, values, validate_only)
    elif resource_type == BROKER_LOGGER:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "AlterConfigs does not support the resource "
                         "type BROKER_LOGGER: use IncrementalAlterConfigs")
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}")


async def handle(broker, ctx, request):
    responses = []
    repeated = repeated_resources(request.resources)
    for resource in request.resources:
        result = AlterConfigsResponse.AlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name)
        responses.append(result)
        try:
            if (resource.resource_type, resource.resource_name) in repeated:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Each resource must appear at most once.")
            check_no_duplicates(c.name for c in resource.configs)
            check_no_nulls(c.name for c in resource.configs if c.value is None)
            values = {c.name: c.value for c in resource.configs}
            await alter_resource(broker, resource.resource_type, resource.resource_name, values,
                           request.validate_only)
        except KafkaError as exc:
            result.error_code = exc.error_code
            result.error_message = exc.message
    return AlterConfigsResponse(responses=responses)
