"""broker/zookeeper.py's ZkClient against a real ZooKeeper: its session outlives a ZooKeeper
restart that lasts longer than the session timeout (the server gives every session a whole
timeout again from its start, and the client must be back within it), as Kafka's Java client
keeps it."""
import asyncio
import time

from broker.zookeeper import ZkClient

SESSION_MS = 6000
OUTAGE_S = 20                   # kazoo's default backoff tried again only ~28 s after the stop


def test_a_zookeeper_restart_longer_than_the_session_keeps_the_session(zookeeper_server):
    async def scenario():
        client = ZkClient(zookeeper_server.connect_string, session_timeout_ms=SESSION_MS)
        await client.start()
        states = []
        client.add_session_listener(states.append)
        try:
            await client.create("/registered", b"me", ephemeral=True)
            session = client.session_id
            zookeeper_server.stop()
            await asyncio.sleep(OUTAGE_S)
            await asyncio.get_running_loop().run_in_executor(None, zookeeper_server.start)
            back = time.monotonic()
            while "resumed" not in states and "connected" not in states \
                    and time.monotonic() - back < 15:
                await asyncio.sleep(0.1)
            took = time.monotonic() - back
            assert states[-1] == "resumed", (states, took)
            assert "expired" not in states
            assert client.session_id == session
            assert (await client.get("/registered"))[0] == b"me"
            assert took < SESSION_MS / 1000, took
        finally:
            await client.close()
    asyncio.run(scenario())
