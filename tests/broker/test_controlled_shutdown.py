"""The broker's controlled shutdown request (broker/cluster.py) against a controller that
accepts the connection and never answers (SIGSTOPped, or stuck moving leaders): each attempt
ends within controller.socket.timeout.ms + request.timeout.ms, as Kafka's, and the process's
hard exit (broker/__main__.py) waits for every attempt, so the shutdown that follows the
last one still writes the clean-shutdown marker."""
import asyncio
import time
from types import SimpleNamespace

from broker.__main__ import HARD_EXIT_AFTER_S, hard_exit_after
from broker.cluster import ClusterMembership
from broker.config import BrokerConfig


def config(**overrides):
    props = {"zookeeper.connect": "127.0.0.1:1", "log.dirs": "/tmp/unused",
             "controlled.shutdown.max.retries": "2", "controlled.shutdown.retry.backoff.ms": "50",
             "controller.socket.timeout.ms": "400", "request.timeout.ms": "300"}
    props.update(overrides)
    return BrokerConfig(props)


def test_each_attempt_ends_within_kafkas_timeouts():
    accepted = []

    async def silent(reader, writer):
        accepted.append(time.monotonic())
        await reader.read()                 # never answers, not even ApiVersions

    async def go():
        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        membership = ClusterMembership.__new__(ClusterMembership)
        membership.config = config()
        membership._registered, membership.controller, membership.broker_epoch = True, None, 7
        endpoints = {membership.inter_broker_listener: ("127.0.0.1", port)}
        membership.broker = SimpleNamespace(broker_id=1, metadata=SimpleNamespace(
            controller_id=0, live_brokers={0: SimpleNamespace(endpoints=endpoints)}))
        began = time.monotonic()
        assert await membership.controlled_shutdown() is False
        took = time.monotonic() - began
        server.close()
        return took
    took = asyncio.run(go())
    assert len(accepted) == 2
    # two attempts of at most 0.4 s to be connected (ApiVersions unanswered) plus a backoff;
    # the ApiVersions wait was the 30 s request timeout, past the 5 s the hard exit allowed
    assert took < 2 * (0.4 + 0.3) + 0.05 + 1.0


def test_the_hard_exit_waits_for_every_attempt():
    defaults = BrokerConfig({"zookeeper.connect": "127.0.0.1:1", "log.dirs": "/tmp/unused"})
    # 3 attempts of 30 s to connect + 30 s for the answer + 5 s backoff, then up to 2 s for
    # the other brokers to name the new leaders
    assert hard_exit_after(defaults) == HARD_EXIT_AFTER_S + 3 * (30 + 30 + 5) + 2
    assert hard_exit_after(BrokerConfig({"log.dirs": "/tmp/unused"})) == HARD_EXIT_AFTER_S
