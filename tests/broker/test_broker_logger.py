"""The BROKER_LOGGER config resource (type 8): logger levels read with DescribeConfigs and changed
with IncrementalAlterConfigs, as Kafka's `kafka-configs.sh --entity-type broker-loggers` does."""
import logging

import pytest

from protocol.errors import ErrorCode
from protocol.messages.alter_configs import AlterConfigsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest

from broker.config import SOURCE_DYNAMIC_BROKER_LOGGER

BROKER_LOGGER = 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DC, IAC = DescribeConfigsRequest, IncrementalAlterConfigsRequest


@pytest.fixture(autouse=True)
def restore_levels():
    """Levels are process-wide: put back whatever the test changed."""
    loggers = [logging.getLogger()] + [
        logger for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)]
    saved = {logger.name: logger.level for logger in loggers}
    yield
    logging.getLogger().setLevel(saved["root"])
    for name, logger in logging.Logger.manager.loggerDict.items():
        if isinstance(logger, logging.Logger):
            logger.setLevel(saved.get(name, logging.NOTSET))


async def describe(client, name="0", keys=None, version=4):
    response = await client.request(DC(resources=[DC.DescribeConfigsResource(
        resource_type=BROKER_LOGGER, resource_name=name, configuration_keys=keys)],
        include_synonyms=True, include_documentation=True), version)
    return response.results[0]


async def alter(client, *ops, name="0", validate_only=False):
    response = await client.request(IAC(resources=[IAC.AlterConfigsResource(
        resource_type=BROKER_LOGGER, resource_name=name,
        configs=[IAC.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])],
        validate_only=validate_only), 1)
    return response.responses[0].error_code


async def levels(client, *names) -> dict:
    result = await describe(client, keys=list(names))
    assert result.error_code == 0
    return {c.name: c.value for c in result.configs}


async def test_describe_lists_root_and_the_broker_loggers(client):
    logging.getLogger().setLevel(logging.INFO)
    result = await describe(client)
    assert result.error_code == 0
    configs = {c.name: c for c in result.configs}
    assert result.configs[0].name == "root"
    assert configs["root"].value == "INFO"
    assert "broker.server" in configs and "broker.connection" in configs
    for entry in result.configs:
        assert entry.config_source == SOURCE_DYNAMIC_BROKER_LOGGER
        assert entry.read_only is False and entry.synonyms == []
        assert entry.value in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
    v0 = await describe(client, keys=["root"], version=0)
    assert [(c.name, c.value, c.is_default) for c in v0.configs] == [("root", "INFO", False)]


@pytest.mark.parametrize("name", ["", "7"])
async def test_describe_needs_this_broker_id(client, name):
    result = await describe(client, name=name)
    assert result.error_code == ErrorCode.INVALID_REQUEST and result.error_message


async def test_set_and_delete_levels(client):
    logging.getLogger().setLevel(logging.INFO)
    assert await alter(client, ("broker.server", SET, "debug"), ("broker", SET, "WARN")) == 0
    assert logging.getLogger("broker.server").level == logging.DEBUG
    assert await levels(client, "broker.server", "broker", "broker.connection") == {
        "broker.server": "DEBUG", "broker": "WARN", "broker.connection": "WARN"}
    assert await alter(client, ("broker.server", DELETE, None)) == 0     # inherits again
    assert await levels(client, "broker.server") == {"broker.server": "WARN"}
    assert await alter(client, ("root", SET, "ERROR"), ("broker", DELETE, None)) == 0
    assert await levels(client, "root", "broker.server") == {"root": "ERROR",
                                                             "broker.server": "ERROR"}
    assert await alter(client, ("broker", SET, "TRACE")) == 0
    assert logging.getLogger("broker.server").isEnabledFor(5)
    assert await alter(client, ("broker", SET, "OFF")) == 0
    assert not logging.getLogger("broker.server").isEnabledFor(logging.CRITICAL)


async def test_validate_only_changes_nothing(client):
    logging.getLogger("broker.server").setLevel(logging.NOTSET)
    assert await alter(client, ("broker.server", SET, "DEBUG"), validate_only=True) == 0
    assert logging.getLogger("broker.server").level == logging.NOTSET


@pytest.mark.parametrize("ops,code", [
    ([("no.such.logger", SET, "INFO")], ErrorCode.INVALID_CONFIG),
    ([("broker.server", SET, "LOUD")], ErrorCode.INVALID_CONFIG),
    ([("root", DELETE, None)], ErrorCode.INVALID_REQUEST),
    ([("broker.server", APPEND, "INFO")], ErrorCode.INVALID_REQUEST),
    ([("broker.server", SUBTRACT, "INFO")], ErrorCode.INVALID_REQUEST),
    ([("broker.server", SET, "INFO"), ("broker.server", DELETE, None)],
     ErrorCode.INVALID_REQUEST),
], ids=["unknown-logger", "bad-level", "delete-root", "append", "subtract", "duplicate"])
async def test_refusals_change_nothing(client, ops, code):
    logging.getLogger("broker").setLevel(logging.NOTSET)
    assert await alter(client, ("broker", SET, "ERROR"), *ops) == code
    assert logging.getLogger("broker").level == logging.NOTSET
    assert "no.such.logger" not in logging.Logger.manager.loggerDict


async def test_alter_needs_this_broker_id(client):
    assert await alter(client, ("broker", SET, "INFO"), name="3") == ErrorCode.INVALID_REQUEST
    assert await alter(client, ("broker", SET, "INFO"), name="") == ErrorCode.INVALID_REQUEST


async def test_legacy_alter_configs_refuses_broker_logger(client):
    AC = AlterConfigsRequest
    response = await client.request(AC(resources=[AC.AlterConfigsResource(
        resource_type=BROKER_LOGGER, resource_name="0",
        configs=[AC.AlterableConfig(name="root", value="DEBUG")])]), 2)
    assert response.responses[0].error_code == ErrorCode.INVALID_REQUEST
