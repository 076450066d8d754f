"""Classic consumer-group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

Theory of operation. A member finds the group coordinator (FindCoordinator), then *joins*: it sends
JoinGroup with the assignors it supports (protocol type "consumer", one protocol per assignor name,
each carrying its ConsumerProtocolSubscription). The coordinator waits for every member, picks a
generation id, a protocol all members support, and a leader; the leader's response lists every member's
subscription. The leader runs the assignor (broker/client/assignors.py) and sends the assignments in
its SyncGroup; everyone else sends an empty SyncGroup; each gets its own assignment back.
A background task heartbeats every ``heartbeat.interval.ms``; REBALANCE_IN_PROGRESS in a heartbeat
answer means "rejoin"; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION mean this member was expelled: its
partitions are lost (``on_lost``: dropped, not committed) and it rejoins with a fresh member id.
FENCED_INSTANCE_ID (another instance with the same group.instance.id) is fatal, as in Java's
client: the next ``ensure_active`` raises it.

Eager vs cooperative (KIP-429): with range/roundrobin/sticky the member revokes all its partitions
before rejoining. With cooperative-sticky it keeps them, reports them as owned, and after SyncGroup
revokes only the partitions it lost; if it lost any it rejoins at once so they can be handed out.
The owner (Consumer) supplies ``on_revoke(partitions)`` / ``on_assign(partitions)`` callbacks
(e.g. to commit offsets before giving partitions up).
"""
from __future__ import annotations

import asyncio
import logging
import re

from protocol.errors import RETRIABLE, ErrorCode, KafkaError
from protocol.messages import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

from broker.client import assignors as assignor_mod
from broker.client.consumer_protocol import (PROTOCOL_TYPE, decode_assignment, decode_subscription,
                                             encode_assignment, encode_subscription, owned_partitions)
from broker.client.errors import ClientError, KafkaTimeoutError

log = logging.getLogger(__name__)

_REFIND = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
_RESET = (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION)


class GroupMembership:
    def __init__(self, cluster, group_id: str, *, assignor_names=("range", "cooperative-sticky"),
                 session_timeout_ms: int = 45000, rebalance_timeout_ms: int = 300000,
                 heartbeat_interval_ms: int = 3000, group_instance_id: str | None = None,
                 on_assign=None, on_revoke=None, on_lost=None,
                 max_join_attempts: int | None = None, metadata_max_age_ms: int = 300000):
        for name in assignor_names:
            if name not in assignor_mod.ASSIGNORS:
                raise ValueError(f"Unknown partition.assignment.strategy: {name}")
        self.cluster = cluster
        self.group_id = group_id
        self.assignor_names = list(assignor_names)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.group_instance_id = group_instance_id
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.on_lost = on_lost
        self.max_join_attempts = max_join_attempts
        self._fatal: Exception | None = None      # FENCED_INSTANCE_ID: raised by ensure_active
        # Partition counts of the subscribed topics when the assignment was made, and when
        # metadata is next looked at for a change (Java's rejoinNeededOrPending on a new
        # metadata snapshot): a topic created or grown after the join gets a rebalance.
        self.metadata_max_age = metadata_max_age_ms / 1000
        self._snapshot: dict = {}
        self._next_metadata_check = 0.0
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader_id: str | None = None
        self.assignment: set = set()
        self.topics: set = set()
        self.pattern: re.Pattern | None = None
        self.coordinator: int | None = None
        self.needs_rejoin = True
        self._heartbeat_task: asyncio.Task | None = None
        self._join_task: asyncio.Task | None = None
        self._closed = False

    @property
    def cooperative(self) -> bool:
        return self.protocol is not None and assignor_mod.ASSIGNORS[self.protocol].cooperative

    def subscribe(self, topics=None, pattern: str | None = None) -> None:
        self.topics = set(topics or ())
        self.pattern = re.compile(pattern) if pattern else None
        self.needs_rejoin = True

    async def _resolve_pattern(self) -> None:
        if self.pattern is None:
            return
        await self.cluster.refresh_metadata(None)
        self.topics = {t for t, m in self.cluster.topics.items() if self.pattern.fullmatch(t) and not m.is_internal}

    async def _coordinator(self) -> int:
        if self.coordinator is None:
            self.coordinator = await self.cluster.retry(lambda: self.cluster.find_coordinator(self.group_id))
        return self.coordinator

    async def ensure_active(self, timeout: float | None = None) -> bool:
        """Join (or rejoin) if needed. Returns True once this member has its assignment for the current
        generation, False if ``timeout`` seconds passed first (the join goes on in the background, so a
        consumer polling with short timeouts keeps serving its other duties, like Kafka's poll)."""
        if self._fatal is not None:
            raise self._fatal
        if not self.needs_rejoin and (self._join_task is None or self._join_task.done()):
            await self._check_metadata()
        if not self.needs_rejoin and (self._join_task is None or self._join_task.done()):
            return True
        if self._join_task is None or self._join_task.done():
            self._join_task = asyncio.get_running_loop().create_task(self._join_loop())
        try:
            await asyncio.wait_for(asyncio.shield(self._join_task), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def _join_loop(self) -> None:
        """Until joined, as Java's joinGroupIfNeeded: retriable errors are retried after the
        backoff for as long as it takes (the caller's poll timeout bounds its own wait), unless
        `max_join_attempts` is set."""
        attempts = 0
        while self.max_join_attempts is None or attempts < self.max_join_attempts:
            attempts += 1
            if await self._join_and_sync():
                if self._heartbeat_task is None or self._heartbeat_task.done():
                    self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())
                if not self.needs_rejoin:
                    return
        raise KafkaTimeoutError(f"Could not join group {self.group_id} after {self.max_join_attempts} attempts")

    def _partition_counts(self) -> dict:
        return {t: len(m.partitions) for t in self.topics
                if (m := self.cluster.topics.get(t)) is not None and not m.error_code}

    async def _check_metadata(self) -> None:
        """Every metadata.max.age.ms (every second while a subscribed topic is missing), as
        Java's consumer: fresh metadata for the subscription (created when the broker allows
        it, as allow.auto.create.topics), and a rejoin if a topic appeared or grew."""
        loop = asyncio.get_running_loop()
        if loop.time() < self._next_metadata_check:
            return
        missing = set(self.topics) - set(self._snapshot)
        self._next_metadata_check = loop.time() + (1.0 if missing else self.metadata_max_age)
        try:
            await self._resolve_pattern()
        except (KafkaError, ClientError) as e:
            log.debug("Metadata refresh for group %s failed: %s", self.group_id, e)
            return
        if not await self._refresh_subscription():
            return
        if self._partition_counts() != self._snapshot:
            log.info("Group %s: the subscribed topics' partitions changed (%s -> %s): rejoining",
                     self.group_id, self._snapshot, self._partition_counts())
            self.needs_rejoin = True

    async def _lose_partitions(self) -> None:
        """Expelled (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION): the partitions are someone else's
        now. The owner drops them without committing (Java's onPartitionsLost), before the
        member joins again with a fresh id."""
        self.member_id, self.generation = "", -1
        lost, self.assignment = self.assignment, set()
        if lost and self.on_lost is not None:
            await self.on_lost(sorted(lost))

    def _fenced(self, where: str) -> KafkaError:
        """FENCED_INSTANCE_ID: another consumer took this group.instance.id. Fatal, as Java's
        (the two would otherwise replace each other in turn, both consuming everything)."""
        self._fatal = KafkaError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"{where} for group {self.group_id}: the static member "
                                 f"{self.group_instance_id} was fenced by another instance with "
                                 f"the same group.instance.id")
        self.needs_rejoin = True
        return self._fatal

    async def _refresh_subscription(self) -> bool:
        """The subscription's metadata, topics created if the broker allows it (Java's
        allow.auto.create.topics); False when the refresh failed."""
        if self.topics:
            try:
                await self.cluster.refresh_metadata(sorted(self.topics),
                                                    allow_auto_topic_creation=True)
            except (KafkaError, ClientError) as e:
                log.debug("Metadata refresh for group %s failed: %s", self.group_id, e)
                return False
        return True

    async def _join_and_sync(self) -> bool:
        await self._resolve_pattern()
        await self._refresh_subscription()
        snapshot = self._partition_counts()
        owned = previous = sorted(self.assignment)
        if not self.cooperative and self.assignment and self.generation >= 0:
            await self._revoke(set(self.assignment))
            owned = []
        protocols = []
        for name in self.assignor_names:
            # the eager sticky assignor's user data carries the previous assignment (Java's
            # StickyAssignor.subscriptionUserData), revoked or not: that is what it sticks to
            user_data = assignor_mod.user_data_for(name, previous if name == "sticky" else owned,
                                                   self.generation)
            protocols.append(JoinGroupRequest.JoinGroupRequestProtocol(
                name=name, metadata=encode_subscription(sorted(self.topics), user_data,
                                                        owned if name == "cooperative-sticky" else (),
                                                        self.generation)))
        try:
            node = await self._coordinator()
            request = JoinGroupRequest(group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
                                       rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
                                       group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
                                       protocols=protocols, reason=None)
            response = await self.cluster.send(node, request, timeout=self.rebalance_timeout_ms / 1000 + 5)
        except (KafkaError, ClientError) as e:
            await self._backoff_or_raise(e, "JoinGroup")
            return False
        code = response.error_code
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            return False
        if code in _RESET:
            await self._lose_partitions()
            return False
        if code == ErrorCode.FENCED_INSTANCE_ID:
            raise self._fenced("JoinGroup")
        if code in _REFIND or code == ErrorCode.REBALANCE_IN_PROGRESS:
            await self._backoff(KafkaError(code))
            return False
        if code:
            raise KafkaError(code, f"JoinGroup for group {self.group_id} failed: {ErrorCode(code).name}")
        self.member_id = response.member_id
        self.generation = response.generation_id
        self.protocol = response.protocol_name
        self.leader_id = response.leader
        assignments = []
        if response.leader == response.member_id:
            assignments = await self._assign(response.members)
        try:
            sync = await self.cluster.send(node, SyncGroupRequest(
                group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
                group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
                protocol_name=self.protocol, assignments=assignments),
                timeout=self.rebalance_timeout_ms / 1000 + 5)
        except (KafkaError, ClientError) as e:
            await self._backoff_or_raise(e, "SyncGroup")
            return False
        if sync.error_code in _RESET:
            await self._lose_partitions()
            return False
        if sync.error_code == ErrorCode.FENCED_INSTANCE_ID:
            raise self._fenced("SyncGroup")
        if sync.error_code in _REFIND or sync.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
            await self._backoff(KafkaError(sync.error_code))
            return False
        if sync.error_code:
            raise KafkaError(sync.error_code, f"SyncGroup for group {self.group_id} failed: "
                                              f"{ErrorCode(sync.error_code).name}")
        new, _ = decode_assignment(sync.assignment)
        new = set(new)
        revoked = self.assignment - new
        added = new - self.assignment
        self.needs_rejoin = False
        if self.cooperative and revoked:
            await self._revoke(revoked)
            self.needs_rejoin = True   # let the revoked partitions be handed out
        self.assignment = new
        self._snapshot = snapshot
        self._next_metadata_check = asyncio.get_running_loop().time() + (
            1.0 if set(self.topics) - set(snapshot) else self.metadata_max_age)
        if self.on_assign is not None and (added or not self.cooperative):
            await self.on_assign(sorted(new if not self.cooperative else added))
        log.info("Joined group %s generation %d as %s with %d partition(s)", self.group_id, self.generation,
                 self.member_id, len(new))
        return True

    async def _assign(self, members) -> list:
        protocol = self.protocol
        subs = []
        all_topics = set()
        for m in members:
            _, sub = decode_subscription(m.metadata)
            all_topics.update(sub.topics)
            subs.append(assignor_mod.member_from_subscription(
                m.member_id, protocol, sub.topics, sub.user_data, owned_partitions(sub),
                sub.generation_id, m.group_instance_id))
        await self.cluster.refresh_metadata(sorted(all_topics))
        counts = {t: len(self.cluster.topics[t].partitions) for t in all_topics
                  if t in self.cluster.topics and not self.cluster.topics[t].error_code}
        result = assignor_mod.ASSIGNORS[protocol].assign(counts, subs)
        return [SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_id, assignment=encode_assignment(tps))
                for member_id, tps in result.items()]

    async def _revoke(self, partitions: set) -> None:
        if self.on_revoke is not None and partitions:
            await self.on_revoke(sorted(partitions))
        self.assignment -= partitions

    async def _backoff_or_raise(self, error: Exception, what: str) -> None:
        """A join step failed: retried after the backoff if retriable (the coordinator moved,
        a broker is down), else raised out of poll() as Java's consumer raises it
        (GROUP_AUTHORIZATION_FAILED, an unsupported version)."""
        retriable = (isinstance(error, KafkaError)
                     and (error.error_code in RETRIABLE or error.error_code in _REFIND)) or \
                    (isinstance(error, ClientError) and error.retriable)
        if not retriable:
            raise error
        log.debug("%s for group %s failed, retrying: %s", what, self.group_id, error)
        await self._backoff(error)

    async def _backoff(self, error: Exception) -> None:
        if isinstance(error, KafkaError) and error.error_code in _REFIND:
            self.coordinator = None
        elif isinstance(error, ClientError):
            self.coordinator = None
        await asyncio.sleep(self.cluster.retry_backoff)

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.heartbeat_interval)
            if self.needs_rejoin or self.generation < 0:
                continue
            try:
                response = await self.cluster.send(await self._coordinator(), HeartbeatRequest(
                    group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
                    group_instance_id=self.group_instance_id))
            except (KafkaError, ClientError) as e:
                await self._backoff(e)
                continue
            code = response.error_code
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                self.needs_rejoin = True
            elif code in _RESET:
                self.needs_rejoin = True
                await self._lose_partitions()
            elif code == ErrorCode.FENCED_INSTANCE_ID:
                self._fenced("Heartbeat")
                return
            elif code in _REFIND:
                self.coordinator = None

    async def leave(self) -> None:
        self._closed = True
        for task in (self._heartbeat_task, self._join_task):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        if not self.member_id or self.group_instance_id is not None:
            return
        try:
            node = await self._coordinator()
            conn = await self.cluster.connection(node)
            version = conn.pick_version(LeaveGroupRequest)
            if version >= 3:
                request = LeaveGroupRequest(group_id=self.group_id, members=[
                    LeaveGroupRequest.MemberIdentity(member_id=self.member_id, reason="the consumer is being closed")])
            else:
                request = LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id)
            await conn.send(request, version, timeout=5)
        except (KafkaError, ClientError) as e:
            log.debug("LeaveGroup failed: %s", e)
        self.member_id, self.generation = "", -1
