"""The offset half of the group manager: commit, fetch, delete, expire; describe/list/delete groups.

`OffsetOperations` is mixed into `GroupManager` (coordinator/group/manager.py) and works on the
same `self.groups`. Like the rest of the manager it is pure: methods return a `Result`.

Commits are two-phase, the way Kafka's pending offset commits work: `commit_offsets` validates
and returns OffsetCommit records, counting each partition in `group.pending_offset_commits`;
when the runtime reports the append, `on_append` replays the records (the ONLY place offsets
change, also used when loading the log) and answers. While a commit is pending, OffsetFetch with
`require_stable` answers UNSTABLE_OFFSET_COMMIT for that partition (KIP-447).

Transactional commits (TxnOffsetCommit, Kafka's storeOffsets with a producer id): the records
are written as a transactional batch of the producer, and once appended they wait in
`group.pending_txn_offsets` until the transaction's marker reaches the group's
`__consumer_offsets` partition (`complete_txn_offsets`, from WriteTxnMarkers, and from the log
when loading): COMMIT makes them the committed offsets, unless a plain commit came later in the
log; ABORT drops them. Until then OffsetFetch with `require_stable` answers
UNSTABLE_OFFSET_COMMIT for those partitions.

Expiry (Kafka's cleanupGroupMetadata, every offsets.retention.check.interval.ms):
  - an Empty group with a protocol: offsets expire `offsets.retention.minutes` after the group
    became Empty (current_state_timestamp);
  - a Stable "consumer" group that knows its subscriptions: offsets of topics nobody subscribes
    to expire that long after their commit (KIP-496);
  - a group that never used group management (simple consumers): after their commit;
  - an offset committed with an explicit retention (OffsetCommit v2-v4) expires at its
    expire_timestamp. Offsets with a pending commit never expire.
Expired offsets are written as tombstones; an Empty group left without offsets becomes Dead and
its GroupMetadata is tombstoned too.
"""
from protocol.errors import ErrorCode

from coordinator.group.model import Group, OffsetAndMetadata
from coordinator.group.state import GroupState
from coordinator.records import GroupKey, OffsetKey, Record
from coordinator.results import (Append, GroupDescription, GroupListing, GroupOffsets,
                                 MemberDescription, PartitionOffset, Result)

E = ErrorCode
S = GroupState

_TO_COORDINATOR_NOT_AVAILABLE = frozenset({
    E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND})
_TO_NOT_COORDINATOR = frozenset({E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR})
_TOO_LARGE = frozenset({E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_FETCH_SIZE})


def map_append_error(error: int, for_offsets: bool = False) -> int:
    """The error a client sees when writing to __consumer_offsets failed, as Kafka maps it:
    its storeGroup for group metadata, maybeConvertOffsetCommitError for offsets (also used
    for deletions). A write that timed out waiting for replicas sends a member back to
    JoinGroup (REBALANCE_IN_PROGRESS); for offsets the timeout itself is retriable."""
    if error == E.REQUEST_TIMED_OUT:
        return error if for_offsets else E.REBALANCE_IN_PROGRESS
    if error in _TO_COORDINATOR_NOT_AVAILABLE:
        return E.COORDINATOR_NOT_AVAILABLE
    if error in _TO_NOT_COORDINATOR:
        return E.NOT_COORDINATOR
    if error in _TOO_LARGE:
        return E.INVALID_COMMIT_OFFSET_SIZE if for_offsets else E.UNKNOWN_SERVER_ERROR
    return error


class OffsetOperations:
    groups: dict[str, Group]
    _info: "callable"           # GroupManager._info: a log line in Kafka's words
    _offset_seq: int            # GroupManager's counter of offsets replayed (their log order)
    partition_for: "callable"   # group id -> its __consumer_offsets partition (or None)

    # --------------------------------------------------------------------------- OffsetCommit
    def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                       generation_id: int,
                       offsets: list[tuple[str, int, int, int, str | None]],
                       now_ms: int, retention_time_ms: int = -1,
                       commit_timestamps: dict | None = None) -> Result:
        """OffsetCommit. `offsets` = [(topic, partition, offset, leader_epoch, metadata)];
        `commit_timestamps` {(topic, partition): ms}: v1's per-partition commit_timestamp,
        stored instead of now unless -1 (Kafka's createOffsetAndMetadata).

        The response is {(topic, partition): error_code}; it arrives through `on_append`
        when anything was written."""
        def all_fail(error):
            return Result(response={(t, p): error for t, p, *_ in offsets})
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # Group management claimed, but no such group: a stale generation.
                return all_fail(E.ILLEGAL_GENERATION)
            # A simple consumer (or admin) storing offsets without group management.
            group = self.groups[group_id] = Group(group_id, now_ms)
        if group.state is S.DEAD:
            return all_fail(E.COORDINATOR_NOT_AVAILABLE)
        if not (generation_id < 0 and group.state is S.EMPTY):
            # (Kafka's validateOffsetCommit: a simple commit to a non-empty group, with no member
            # id, fails the member check too.)
            error = group.member_error(member_id, group_instance_id)
            if error != E.NONE:
                return all_fail(error)
            member = group.members[member_id]
            if generation_id != group.generation_id:
                return all_fail(E.ILLEGAL_GENERATION)
            if group.state is S.COMPLETING_REBALANCE:
                # The member holds this generation but has no assignment yet.
                return all_fail(E.REBALANCE_IN_PROGRESS)
            # A commit counts as a heartbeat (Stable and PreparingRebalance).
            timers = [self._schedule_heartbeat(group, member, now_ms)]
        else:
            timers = []
        return self._store_offsets(group, offsets, now_ms, retention_time_ms, timers,
                                   commit_timestamps=commit_timestamps)

    def _store_offsets(self, group: Group, offsets, now_ms: int, retention_time_ms: int,
                       timers: list, producer_id: int = -1,
                       commit_timestamps: dict | None = None) -> Result:
        errors: dict[tuple[str, int], int] = {}
        records: list[Record] = []
        expire = now_ms + retention_time_ms if retention_time_ms >= 0 else -1
        limit = self.config.offset_metadata_max_bytes
        group_id = group.group_id
        pending = group.pending_offset_commits
        deletions = group.offset_deletions
        staged_at = {}
        for topic, partition, offset, leader_epoch, metadata in offsets:
            tp = (topic, partition)
            staged_at[tp] = deletions.get(tp, 0)
            metadata = metadata or ""
            # Kafka counts Java chars (UTF-16 code units: two for a character beyond the BMP),
            # not bytes; most metadata needs no encoding to check.
            if len(metadata) * 2 > limit and len(metadata.encode("utf-16-le")) // 2 > limit:
                errors[tp] = E.OFFSET_METADATA_TOO_LARGE
                continue
            errors[tp] = E.NONE
            committed_ms = now_ms
            if commit_timestamps and commit_timestamps.get(tp, -1) != -1:
                committed_ms = commit_timestamps[tp]
            records.append(Record(OffsetKey(group_id, topic, partition), OffsetAndMetadata(
                offset, leader_epoch, metadata, committed_ms, expire)))
            pending[tp] = pending.get(tp, 0) + 1
        if not records:
            return Result(response=errors, timers=timers)

        def on_append(error: int, now: int) -> Result:
            code = E.NONE if error == E.NONE else map_append_error(error, for_offsets=True)
            # Kafka's putCacheCallback: a group gone meanwhile (Dead: unloaded with its
            # partition, or deleted) takes nothing, so no group is created again from it
            live = group.state is not S.DEAD and self.groups.get(group_id) is group
            for record in records:
                tp = (record.key.topic, record.key.partition)
                if group.offset_deletions.get(tp, 0) != staged_at[tp]:
                    # OffsetDelete or a topic deletion took the partition's offsets (and its
                    # pending count) after this commit was staged: it is not applied either,
                    # as Kafka's onOffsetCommitAppend; a commit staged after still is
                    errors[tp] = code
                    continue
                left = group.pending_offset_commits.get(tp, 0)
                if left > 1:
                    group.pending_offset_commits[tp] = left - 1
                else:
                    group.pending_offset_commits.pop(tp, None)
                if code == E.NONE and live:
                    if producer_id >= 0:
                        self.replay_txn_offset(producer_id, record, now)
                    else:
                        self.replay(record, now)
                errors[tp] = code
            return Result(response=errors)
        return Result(timers=timers, appends=[Append(records, on_append)])

    # ------------------------------------------------------------------------ TxnOffsetCommit
    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                           member_id: str, group_instance_id: str | None, generation_id: int,
                           offsets: list[tuple[str, int, int, int, str | None]],
                           now_ms: int, verification=None) -> Result:
        """TxnOffsetCommit: like commit_offsets, but the offsets count only once the
        transaction commits. The member checks apply only when the request names a member,
        an instance or a generation (KIP-447; older clients send none), and not to a generation
        below 0 on an Empty group, as Kafka's validateOffsetCommit for transactional commits. `verification`: the guard of the
        broker's check with the transaction coordinator, carried by the append."""
        def all_fail(error):
            return Result(response={(t, p): error for t, p, *_ in offsets})
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, now_ms)
        if group.state is S.DEAD:
            return all_fail(E.COORDINATOR_NOT_AVAILABLE)
        if generation_id < 0 and group.state is S.EMPTY:
            pass        # a consumer that assigns its own partitions (group.instance.id or not)
        elif generation_id >= 0 or member_id or group_instance_id is not None:
            error = group.member_error(member_id, group_instance_id)
            if error != E.NONE:
                return all_fail(error)
            if generation_id != group.generation_id:
                return all_fail(E.ILLEGAL_GENERATION)
        result = self._store_offsets(group, offsets, now_ms, -1, [], producer_id)
        for append in result.appends:
            append.producer_id, append.producer_epoch = producer_id, producer_epoch
            append.verification = verification
        return result

    def complete_txn_offsets(self, producer_id: int, partitions, committed: bool,
                             now_ms: int) -> Result:
        """A transaction's marker reached these `__consumer_offsets` partitions (None: every
        group, for a load that replays one partition): commit or drop its pending offsets."""
        for group in list(self.groups.values()):
            pending = group.pending_txn_offsets.get(producer_id)
            if pending is None:
                continue
            if partitions is not None and self.partition_for is not None and \
                    self.partition_for(group.group_id) not in partitions:
                continue
            del group.pending_txn_offsets[producer_id]
            if not committed:
                continue
            for tp, (offset, order) in pending.items():
                if order > group.offset_order.get(tp, -1):
                    group.offsets[tp] = offset
                    group.offset_order[tp] = order
        return Result()

    def replay_txn_offset(self, producer_id: int, record: Record, now_ms: int) -> None:
        """Load path: a transactional offset commit record, pending until its marker."""
        key = record.key
        if not isinstance(key, OffsetKey) or record.value is None:
            return
        group = self.groups.get(key.group)
        if group is None:
            group = self.groups[key.group] = Group(key.group, now_ms)
        self._offset_seq += 1
        group.pending_txn_offsets.setdefault(producer_id, {})[(key.topic, key.partition)] = \
            (record.value, self._offset_seq)

    # ---------------------------------------------------------------------------- OffsetFetch
    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None,
                      require_stable: bool = False) -> GroupOffsets:
        """OffsetFetch for one group; `partitions` None means every committed offset."""
        group = self.groups.get(group_id)
        answer = GroupOffsets(group_id)
        if group is None or group.state is S.DEAD:
            answer.partitions = [PartitionOffset(t, p) for t, p in partitions or ()]
            return answer
        if partitions is None:
            partitions = sorted(group.offsets)
        for topic, partition in partitions:
            tp = (topic, partition)
            if require_stable and (tp in group.pending_offset_commits or any(
                    tp in pending for pending in group.pending_txn_offsets.values())):
                answer.partitions.append(
                    PartitionOffset(topic, partition, error=E.UNSTABLE_OFFSET_COMMIT))
                continue
            committed = group.offsets.get(tp)
            if committed is None:
                answer.partitions.append(PartitionOffset(topic, partition))
            else:
                answer.partitions.append(PartitionOffset(
                    topic, partition, committed.offset, committed.leader_epoch, committed.metadata))
        return answer

    # --------------------------------------------------------------------------- OffsetDelete
    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]],
                       now_ms: int) -> Result:
        """OffsetDelete (KIP-496). Response: (group_error, {(topic, partition): error})."""
        group = self.groups.get(group_id)
        if group is None or group.state is S.DEAD:
            return Result(response=(E.GROUP_ID_NOT_FOUND, {}))
        errors: dict[tuple[str, int], int] = {}
        if group.state is S.EMPTY:
            deletable = list(partitions)
        elif group.protocol_type != "consumer":
            return Result(response=(E.NON_EMPTY_GROUP, {}))
        else:
            # A consumer group whose subscriptions cannot be read (no protocol chosen yet,
            # unparsable metadata) counts as subscribed to every topic, as in Kafka.
            subscribed = group.subscribed_topics()
            deletable = []
            for tp in partitions:
                if subscribed is None or tp[0] in subscribed:
                    errors[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    deletable.append(tp)
        records = []
        for tp in deletable:
            errors[tp] = E.NONE
            # Kafka's removeOffsets: commits in flight and transactions' pending offsets of
            # the partition go too (a later COMMIT marker does not bring the offset back)
            if group.pending_offset_commits.pop(tp, None) is not None:
                group.offset_deletions[tp] = group.offset_deletions.get(tp, 0) + 1
            for pending in group.pending_txn_offsets.values():
                pending.pop(tp, None)
            if tp in group.offsets:
                records.append(Record(OffsetKey(group_id, tp[0], tp[1]), None))
        if not records:
            return Result(response=(E.NONE, errors))
        # Kafka's cleanupGroupMetadata: an Empty group left with no offsets is Dead at once
        # (--list no longer shows it), not at the next retention check.
        if group.state is S.EMPTY and not group.members and not group.pending_offset_commits \
                and not any(group.pending_txn_offsets.values()) \
                and set(group.offsets) <= set(deletable):
            self._mark_dead(group, now_ms)
            records.append(Record(GroupKey(group_id), None))
        return Result(appends=[Append(records,
                                             self._replay_then_answer(records, (E.NONE, errors)))])

    def _replay_then_answer(self, records: list[Record], response, done_message=None):
        """The follow-up of an append that deletes: replay and answer, or revive and fail.
        `done_message` is logged once the records are in the log."""
        def on_append(error: int, now: int) -> Result:
            if error != E.NONE:
                code = map_append_error(error, for_offsets=True)
                self._revive(records)
                if isinstance(response, tuple):
                    return Result(response=(code, {}))
                return Result(response={gid: code if response[gid] == E.NONE else response[gid]
                                        for gid in response})
            for record in records:
                self.replay(record, now)
            if done_message:
                self._info(done_message)
            return Result(response=response)
        return on_append

    def _mark_dead(self, group: Group, now_ms: int, log_line: bool = True) -> None:
        """Dead while its tombstones are written; `_revive` undoes it if they are not.
        `log_line`: Kafka's cleanupGroupMetadata line (not for DeleteGroups, which Kafka's
        handleDeleteGroups marks Dead itself)."""
        if log_line:
            self._info(f"Group {group.group_id} transitioned to Dead in generation "
                       f"{group.generation_id}")
        group.empty_since = (group.state_timestamp_ms,)
        group.transition_to(S.DEAD, now_ms)

    def _revive(self, records: list[Record]) -> None:
        """A group deletion (DeleteGroups, expiry) whose tombstones were not written did not
        happen: its group, marked Dead meanwhile, is Empty again, since the time it was Empty
        before (its offsets' retention is not restarted). The one transition out of Dead, made
        here on purpose rather than through the table."""
        for record in records:
            if isinstance(record.key, GroupKey):
                group = self.groups.get(record.key.group)
                if group is not None and group.state is S.DEAD:
                    group.state = S.EMPTY
                    if group.empty_since is not None:
                        (group.state_timestamp_ms,) = group.empty_since    # None stays None
                        group.empty_since = None

    # --------------------------------------------------------------------------- DeleteGroups
    def delete_groups(self, group_ids: list[str], now_ms: int) -> Result:
        """DeleteGroups: only Empty groups go; their offsets and metadata become tombstones."""
        errors: dict[str, int] = {}
        records: list[Record] = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None or group.state is S.DEAD:
                errors[group_id] = E.GROUP_ID_NOT_FOUND
            elif group.state is not S.EMPTY:
                errors[group_id] = E.NON_EMPTY_GROUP
            else:
                self._mark_dead(group, now_ms, log_line=False)
                records.extend(Record(OffsetKey(group_id, t, p), None) for t, p in group.offsets)
                records.append(Record(GroupKey(group_id), None))
                errors[group_id] = E.NONE
        if not records:
            return Result(response=errors)
        deleted = [g for g, error in errors.items() if error == E.NONE]
        done = (f"The following groups were deleted: {', '.join(deleted)}. A total of "
                f"{len(records) - len(deleted)} offsets were removed.")
        return Result(appends=[Append(records, self._replay_then_answer(records, errors, done))])

    # ------------------------------------------------------------------------------- expiry
    def expire_offsets(self, now_ms: int) -> Result:
        result = Result(timers=[(("expire-offsets",),
                                 now_ms + self.config.offsets_retention_check_interval_ms)])
        records: list[Record] = []
        for group in list(self.groups.values()):
            if group.state is S.DEAD:
                continue
            expired = self._expired_offsets(group, now_ms)
            records.extend(Record(OffsetKey(group.group_id, t, p), None) for t, p in expired)
            # Kafka's hasOffsets counts a transaction's pending offsets too: the group stays
            # for the marker that makes them committed.
            if group.state is S.EMPTY and not group.pending_offset_commits and \
                    not group.pending_txn_offsets and \
                    set(group.offsets) <= set(expired) and not group.members:
                self._mark_dead(group, now_ms)
                records.append(Record(GroupKey(group.group_id), None))
        if records:
            # Kafka logs the line only when offsets were removed
            result.appends.append(Append(records, self._replay_expiry(
                records, "Removed {} expired offsets in {} milliseconds.", now_ms)))
        return result

    def _replay_expiry(self, records, done: str, started_ms: int, always: bool = False):
        def on_append(error: int, now: int) -> Result:
            if error == E.NONE:
                for record in records:
                    self.replay(record, now)
                offsets = sum(1 for r in records if isinstance(r.key, OffsetKey))
                if offsets or always:
                    self._info(done.format(offsets, now - started_ms))
            else:
                self._revive(records)
            return Result()
        return on_append

    # ---------------------------------------------------------------------- deleted topics
    def remove_offsets_of_deleted(self, partitions: set, now_ms: int) -> Result:
        """Kafka's handleDeletedPartitions: the partitions of a deleted topic lose their
        committed offsets (tombstones), commits in flight and pending transactional offsets in
        every group, and an Empty
        group left with no offsets is Dead, so a topic created again under the name starts
        from the consumers' auto.offset.reset rather than from the old topic's offsets."""
        records: list[Record] = []
        for group in list(self.groups.values()):
            if group.state is S.DEAD:
                continue
            touched = False
            for pending in group.pending_txn_offsets.values():
                for tp in partitions & set(pending):
                    del pending[tp]
                    touched = True
            for tp in partitions & set(group.pending_offset_commits):
                del group.pending_offset_commits[tp]       # their appends are not applied
                group.offset_deletions[tp] = group.offset_deletions.get(tp, 0) + 1
                touched = True
            gone = sorted(partitions & set(group.offsets))
            records.extend(Record(OffsetKey(group.group_id, t, p), None) for t, p in gone)
            if (gone or touched) and group.state is S.EMPTY and not group.members and \
                    not group.pending_offset_commits and \
                    not any(group.pending_txn_offsets.values()) and \
                    set(group.offsets) <= set(gone):
                self._mark_dead(group, now_ms)
                records.append(Record(GroupKey(group.group_id), None))
        listed = ", ".join(f"{t}-{p}" for t, p in sorted(partitions))    # Kafka's mkString(", ")
        done = f"Removed {{}} offsets associated with deleted partitions: {listed}."
        if not records:
            self._info(done.format(0))          # Kafka logs it in every case
            return Result()
        return Result(appends=[Append(records, self._replay_expiry(
            records, done, now_ms, always=True))])

    def _expired_offsets(self, group: Group, now_ms: int) -> list[tuple[str, int]]:
        retention = self.config.offsets_retention_ms
        if group.protocol_type and group.state is S.EMPTY:
            # since the group became Empty; a group loaded from a record without that time
            # (GroupMetadataValue v0/v1, Kafka before 2.1): since each offset's commit
            def base(o):
                if group.state_timestamp_ms is None:
                    return o.commit_timestamp
                return group.state_timestamp_ms
            keep_topics = set()
        elif group.protocol_type == "consumer" and group.state is S.STABLE:
            keep_topics = group.subscribed_topics()
            if keep_topics is None:
                return []

            def base(o):
                return o.commit_timestamp
        elif not group.protocol_type:
            keep_topics = set()

            def base(o):
                return o.commit_timestamp
        else:
            return []
        expired = []
        for tp, o in group.offsets.items():
            if tp[0] in keep_topics or tp in group.pending_offset_commits:
                continue
            if o.expire_timestamp >= 0:
                if now_ms >= o.expire_timestamp:
                    expired.append(tp)
            elif now_ms - base(o) >= retention:
                expired.append(tp)
        return expired

    # -------------------------------------------------------------------------------- replay
    def replay(self, record: Record, now_ms: int, loading: bool = False) -> None:
        """Applies one __consumer_offsets record: the load path and the commit path alike.

        `loading`: when a group that only ever held offsets loses its last one while the log
        is being loaded, it is dropped, as Kafka's loader never creates it; live, such a group
        stays (Empty) until DeleteGroups or expiry removes it."""
        key = record.key
        if isinstance(key, OffsetKey):
            group = self.groups.get(key.group)
            if record.value is None:
                if group is not None:
                    group.offsets.pop((key.topic, key.partition), None)
                    if loading and is_bare_simple_group(group):
                        del self.groups[key.group]     # as if it never existed (Kafka's load)
                return
            if group is None:
                group = self.groups[key.group] = Group(key.group, now_ms)
            group.offsets[(key.topic, key.partition)] = record.value
            self._offset_seq += 1
            group.offset_order[(key.topic, key.partition)] = self._offset_seq
        else:
            group = self.groups.get(key.group)
            if record.value is None and group is not None and group.state is S.DEAD:
                del self.groups[key.group]
                return
            self._replay_group(key, record.value, now_ms)

    # ---------------------------------------------------------------- Describe/ListGroups
    def describe_groups(self, group_ids: list[str]) -> list[GroupDescription]:
        answers = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                # Kafka describes an unknown group as Dead with no error (before v6).
                answers.append(GroupDescription(group_id, E.NONE, S.DEAD.value))
                continue
            stable = group.state is S.STABLE
            members = [MemberDescription(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.metadata(group.protocol_name) if stable else b"",
                m.assignment if stable else b"") for m in group.members.values()]
            answers.append(GroupDescription(
                group_id, E.NONE, group.state.value, group.protocol_type or "",
                (group.protocol_name or "") if stable else "", members))
        return answers

    def list_groups(self, states: list[str] | None = None,
                    types: list[str] | None = None) -> list[GroupListing]:
        """ListGroups; `states` (v4+) and `types` (v5+, only "classic" groups exist here)
        filter case-insensitively; an empty or None filter matches all."""
        wanted = {s.lower() for s in states} if states else None
        if types and "classic" not in {t.lower() for t in types}:
            return []
        return [GroupListing(g.group_id, g.protocol_type or "", g.state.value)
                for g in self.groups.values()
                if g.state is not S.DEAD and (wanted is None or g.state.value.lower() in wanted)]


def is_bare_simple_group(group: Group) -> bool:
    """An Empty group that only ever stored offsets, and has none left (committed or pending
    in a transaction)."""
    return (group.state is S.EMPTY and not group.offsets and not group.pending_offset_commits
            and not group.pending_txn_offsets and not group.protocol_type
            and group.generation_id == 0 and not group.members)
