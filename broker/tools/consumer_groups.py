"""kafka-consumer-groups.sh: list, describe, delete consumer groups; reset and delete their offsets.

Output follows Kafka 3.x's ConsumerGroupCommand: space-padded columns (``%-Ns``, widths at least 15
and grown to the longest value), a blank line before each table, ``-`` for missing values:
    GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID   (--describe)
    GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS [ASSIGNMENT]                            (--members [--verbose])
    GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS                            (--state)
    GROUP TOPIC PARTITION NEW-OFFSET                                                     (--reset-offsets)
    TOPIC PARTITION STATUS                                                               (--delete-offsets)
    GROUP [TYPE] [STATE]                                                                 (--list --state/--type)
No blank line after a table (Kafka 3.x's printing); a group without rows gets its state notice on
stderr ("Consumer group 'g' has no active members.") and, for --members, the header alone
(Kafka 3.9's printMembers). Argument checks and their
messages are Kafka's checkArgs (``check_args``), done before connecting. Offsets are reset only while the group has no active members; ``--dry-run`` is the default and
``--execute`` commits. Unlike Kafka (which prints "Error: ..." on stdout and exits 0), a missing group
or an inactive-group violation ends with one line on stderr and exit status 1 (issue 6's rule).
"""
from __future__ import annotations

import datetime
import re
import sys
import time

from protocol.errors import ErrorCode, KafkaError

from broker.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Admin
from broker.client.cluster import ClusterClient
from broker.client.consumer_protocol import decode_assignment
from broker.client.types import TopicPartition
from broker.config import java_int
from broker.tools.common import (TerseError, ToolError, ToolParser, add_bootstrap, client_kwargs, error_text,
                                 exception_class, main_entry, read_properties)
from broker.tools.javautil import java_hash_order, java_split, java_string_hash

MISSING = "-"


def build_parser() -> ToolParser:
    p = ToolParser("kafka-consumer-groups.sh", "This tool helps to list all consumer groups, describe a consumer "
                   "group, delete consumer group info, or reset consumer group offsets.",
                   dash_values=("--by-duration",))
    add_bootstrap(p, required=True)
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument("--list", action="store_true", help="List all consumer groups.")
    actions.add_argument("--describe", action="store_true",
                         help="Describe consumer group and list offset lag (number of messages not yet processed) "
                              "related to given group.")
    actions.add_argument("--delete", action="store_true", help="Pass in groups to delete topic partition offsets "
                                                               "and ownership information over the entire consumer group.")
    actions.add_argument("--reset-offsets", action="store_true",
                         help="Reset offsets of consumer group. Supports one consumer group at the time, and "
                              "instances should be inactive.")
    actions.add_argument("--delete-offsets", action="store_true", help="Delete offsets of consumer group.")
    p.add_argument("--group", action="append", metavar="<String: consumer group>",
                   help="The consumer group we wish to act on.")
    p.add_argument("--all-groups", action="store_true", help="Apply to all consumer groups.")
    p.add_argument("--topic", action="append", metavar="<String: topic>",
                   help="The topic whose consumer group information should be deleted or topic whose should be "
                        "included in the reset offset process (topic or topic:0,1,2).")
    p.add_argument("--all-topics", action="store_true",
                   help="Consider all topics assigned to a group in the `reset-offsets` process.")
    p.add_argument("--members", action="store_true", help="Describe members of the group.")
    p.add_argument("--offsets", action="store_true", help="Describe the group and list all topic partitions in the "
                                                          "group along with their offset lag. (default)")
    p.add_argument("--state", nargs="?", const="", metavar="[String]",
                   help="When specified with '--describe', includes the state of the group. When specified with "
                        "'--list', it displays the state of all groups; it can also filter by states.")
    p.add_argument("--type", nargs="?", const="", metavar="[String]",
                   help="When specified with '--list', it displays the types of all the groups. It can also be used "
                        "to list groups with specific types (classic, consumer).")
    p.add_argument("--verbose", action="store_true", help="Provide additional information, if any, when "
                                                          "describing the group.")
    p.add_argument("--timeout", type=int, default=5000, metavar="<Long: timeout (ms)>",
                   help="The timeout that can be set for some use cases. (default: 5000)")
    p.add_argument("--to-offset", type=int, metavar="<Long: offset>", help="Reset offsets to a specific offset.")
    p.add_argument("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    p.add_argument("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    p.add_argument("--to-current", action="store_true", help="Reset offsets to current offset.")
    p.add_argument("--shift-by", type=int, metavar="<Long: number-of-offsets>",
                   help="Reset offsets shifting current offset by 'n', where 'n' can be positive or negative.")
    p.add_argument("--to-datetime", metavar="<String: datetime>",
                   help="Reset offsets to offset from datetime. Format: 'YYYY-MM-DDTHH:mm:SS.sss'")
    p.add_argument("--by-duration", metavar="<String: duration>",
                   help="Reset offsets to offset by duration from current timestamp. Format: 'PnDTnHnMnS'")
    p.add_argument("--from-file", metavar="<String: path to CSV file>",
                   help="Reset offsets to values defined in CSV file.")
    p.add_argument("--dry-run", action="store_true", help="Only show results without executing changes on "
                                                          "Consumer Groups. Supported operations: reset-offsets.")
    p.add_argument("--execute", action="store_true", help="Execute operation. Supported operations: reset-offsets.")
    p.add_argument("--export", action="store_true", help="Export operation execution to a CSV file.")
    return p


DELETE_OFFSETS_ERRORS = {
    ErrorCode.INVALID_GROUP_ID: "'{group}' is not valid.",
    ErrorCode.GROUP_ID_NOT_FOUND: "'{group}' does not exist.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Access to '{group}' is not authorized.",
    ErrorCode.NON_EMPTY_GROUP: "Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty.",
}
PARTITION_LEVEL_ERRORS = (ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
def _fmt(widths, values) -> str:
    """Java's "%-Ns %-Ns ... %s": all but the last column left-justified to their width."""
    return " ".join(f"{v:<{w}}" for v, w in zip(values[:-1], widths)) + " " + str(values[-1])


def parse_datetime(text: str) -> int:
    """Kafka's reset-offsets datetime: 'YYYY-MM-DDTHH:mm:SS.sss' with optional zone (Z or +hh:mm)."""
    for fmt in ("%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S"):
        try:
            dt = datetime.datetime.strptime(text.replace("Z", "+0000"), fmt)
            break
        except ValueError:
            continue
    else:
        raise ToolError(f"Error parsing timestamp. It does not conform to the format: YYYY-MM-DDTHH:mm:SS.sss "
                        f"(got '{text}')")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)   # UTC, as Kafka's Utils.getDateTime adds "Z"
    return int(dt.timestamp() * 1000)


# java.time.Duration.parse: an optional sign, P, days, then T with hours, minutes and seconds
# (each signed; seconds with up to 9 fraction digits after "." or ","), at least one part.
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?)(\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as Java's Duration.parse reads it ("PT1H", "-PT1H",
    "P1DT0.5S", "PT-1H"), truncated to the millisecond."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 7)):
        raise ToolError(f"Invalid duration '{text}': expected ISO-8601 'PnDTnHnMnS'")
    sign, days, _t, hours, minutes, s_sign, seconds, fraction = m.groups()
    nanos = (int(seconds or 0) * 10**9 + int((fraction or "").ljust(9, "0") or 0)) * (-1 if s_sign == "-" else 1)
    nanos += ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60 * 10**9
    nanos *= -1 if sign == "-" else 1
    return int(nanos / 10**6) if nanos >= 0 else -((-nanos) // 10**6)


class GroupsTool:
    def __init__(self, admin: Admin, cluster: ClusterClient, opts):
        self.admin = admin
        self.cluster = cluster
        self.opts = opts

    async def group_ids(self) -> list:
        if self.opts.all_groups:
            return [g for g, ptype, _ in await self.admin.list_groups() if ptype in ("consumer", "")]
        if not self.opts.group:
            raise ToolError("Option [group] takes one argument" if self.opts.describe or self.opts.reset_offsets
                            else "Missing required argument \"[group]\"")
        return list(dict.fromkeys(self.opts.group))       # each once, as Kafka's admin key sets

    # --- list ---------------------------------------------------------------------------------

    async def list(self) -> None:
        """Names only; with --state and/or --type (Kafka 3.7's KIP-848 flag) a GROUP [TYPE] [STATE]
        table. This broker runs the classic protocol only, so every group's type is Classic."""
        states = None
        if self.opts.state:
            states = [s.strip() for s in self.opts.state.split(",")]
            # Kafka 3.9's ConsumerGroupState (Assigning and Reconciling are KIP-848's, which
            # classic groups never are in)
            known = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
                     "Assigning", "Reconciling")
            lower = {k.lower(): k for k in known}
            bad = [s for s in states if s.lower() not in lower]
            if bad:
                raise ToolError(f"Invalid state list '{self.opts.state}'. Valid states are: "
                                + ", ".join(known))
            states = [lower[s.lower()] for s in states]
        types = None
        if self.opts.type:
            types = {t.strip().lower() for t in self.opts.type.split(",")}
            if not types <= {"classic", "consumer"}:
                raise ToolError(f"Invalid types list '{self.opts.type}'. Valid types are: Consumer, Classic")
        groups = [g for g in await self.admin.list_groups(states) if g[1] in ("consumer", "")]
        if types is not None and "classic" not in types:
            groups = []
        if self.opts.state is None and self.opts.type is None:
            for g, _, _ in groups:
                print(g)
            return
        width = max([15] + [len(g) for g, _, _ in groups]) + 10
        columns = [("TYPE", lambda state: "Classic")] if self.opts.type is not None else []
        if self.opts.state is not None:
            columns.append(("STATE", lambda state: state))
        print(f"{'GROUP':<{width}}" + "".join(f" {name:<20}" for name, _ in columns))
        for g, _, state in groups:
            print(f"{g:<{width}}" + "".join(f" {value(state):<20}" for _, value in columns))

    # --- describe -----------------------------------------------------------------------------

    async def describe_one(self, group_id: str):
        group = await self.admin.describe_group(group_id)
        if group.error_code == ErrorCode.GROUP_ID_NOT_FOUND or group.group_state == "Dead":
            raise ToolError(f"Consumer group '{group_id}' does not exist.")
        return group

    def _state_notice(self, group) -> None:
        if group.group_state == "Empty":
            sys.stderr.write(f"\nConsumer group '{group.group_id}' has no active members.\n")
        elif group.group_state in ("PreparingRebalance", "CompletingRebalance"):
            sys.stderr.write(f"\nWarning: Consumer group '{group.group_id}' is rebalancing.\n")

    async def describe(self) -> None:
        """Each group in name order; a missing group does not stop the others (as in Kafka), and the
        missing ones are reported together at the end, in one line."""
        missing = []
        for group_id in sorted(await self.group_ids()):
            try:
                group = await self.describe_one(group_id)
            except ToolError as e:
                missing.append(str(e))
                continue
            if self.opts.members:
                await self.describe_members(group)
            elif self.opts.state is not None and not self.opts.offsets:
                await self.describe_state(group)
            else:
                await self.describe_offsets(group)
        if missing:
            raise ToolError(" ".join(missing))

    async def describe_offsets(self, group) -> None:
        committed = await self.admin.fetch_offsets(group.group_id)
        rows = []   # (topic, partition, offset, consumer_id, host, client_id)
        assigned = set()
        members = []
        for m in group.members:
            tps, _ = decode_assignment(m.member_assignment) if group.protocol_type == "consumer" else ([], None)
            if tps:
                members.append((m, tps))
        members.sort(key=lambda x: -len(x[1]))
        for m, tps in members:
            for tp in sorted(tps):
                assigned.add(tp)
                rows.append((tp, m.member_id, m.client_host, m.client_id))
        for tp in sorted(committed):
            if tp not in assigned:
                rows.append((tp, MISSING, MISSING, MISSING))
        self._state_notice(group)
        if not rows:
            return
        ends = await self._log_end_offsets([r[0] for r in rows])
        table = []
        for tp, consumer_id, host, client_id in rows:
            current = committed.get(tp, (None,))[0]
            end = ends.get(tp)
            lag = end - current if current is not None and current >= 0 and end is not None else None
            table.append([group.group_id, tp.topic, str(tp.partition),
                          MISSING if current is None else str(current), MISSING if end is None else str(end),
                          MISSING if lag is None else str(lag), consumer_id, host, client_id])
        w = [max(15, *(len(r[0]) for r in table)), max(15, *(len(r[1]) for r in table)), 10, 15, 15, 15,
             max(15, *(len(r[6]) for r in table)), max(15, *(len(r[7]) for r in table))]
        print()
        print(_fmt(w, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                       "HOST", "CLIENT-ID"]))
        for r in table:
            print(_fmt(w, r))

    async def _log_end_offsets(self, tps) -> dict:
        tps = [tp for tp in tps if tp.topic in self.cluster.topics or await self._topic_exists(tp.topic)]
        if not tps:
            return {}
        listed = await self.admin.list_offsets({tp: LATEST_TIMESTAMP for tp in tps})
        return {tp: r.offset for tp, r in listed.items() if not r.error_code}

    async def _topic_exists(self, topic) -> bool:
        try:
            await self.cluster.topic_metadata(topic)
            return True
        except KafkaError:
            return False

    async def describe_members(self, group) -> None:
        rows = []
        for m in group.members:
            tps, _ = decode_assignment(m.member_assignment) if group.protocol_type == "consumer" else ([], None)
            rows.append((m, sorted(tps)))
        self._state_notice(group)
        # Kafka 3.9's printMembers prints the header also for a group without members
        with_instance = any(m.group_instance_id for m, _ in rows)
        w = [max([15] + [len(group.group_id)]), max([15] + [len(m.member_id) for m, _ in rows])]
        if with_instance:
            w.append(max([17] + [len(m.group_instance_id or "") for m, _ in rows]))
        w += [max([15] + [len(m.client_host) for m, _ in rows]), max([15] + [len(m.client_id) for m, _ in rows]), 15]
        header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
                 ["HOST", "CLIENT-ID", "#PARTITIONS"]
        print()
        print(self._members_line(w, header, "ASSIGNMENT" if self.opts.verbose else None))
        for m, tps in rows:
            values = [group.group_id, m.member_id] + ([m.group_instance_id or ""] if with_instance else []) + \
                     [m.client_host, m.client_id, str(len(tps))]
            assignment = None
            if self.opts.verbose:
                by_topic = {}
                for tp in tps:
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                assignment = ", ".join(sorted(f"{t}({','.join(map(str, sorted(ps)))})"
                                              for t, ps in by_topic.items())) or MISSING
            print(self._members_line(w, values, assignment))

    @staticmethod
    def _members_line(widths, values, last) -> str:
        line = " ".join(f"{v:<{w}}" for v, w in zip(values, widths)) + " "
        return line + last if last is not None else line

    async def describe_state(self, group) -> None:
        """Kafka's quirk kept: the GROUP column takes the coordinator column's width, and the
        COORDINATOR (ID) column is a fixed 25 wide."""
        node = await self.cluster.find_coordinator(group.group_id)
        broker = self.cluster.brokers[node]
        coordinator = f"{broker.host}:{broker.port}  ({node})"         # two spaces, as Kafka
        self._state_notice(group)
        width = max(25, len(coordinator))
        strategy = group.protocol_data or ""
        print()
        print(f"{'GROUP':<{width}} {'COORDINATOR (ID)':<25} {'ASSIGNMENT-STRATEGY':<20} {'STATE':<15} #MEMBERS")
        print(f"{group.group_id:<{width}} {coordinator:<25} {strategy:<20} {group.group_state:<15} "
              f"{len(group.members)}")

    # --- delete -------------------------------------------------------------------------------

    async def delete(self) -> int:
        ids = await self.group_ids()
        results = await self.admin.delete_groups(ids)
        failed = {g: c for g, c in results.items() if c}
        ok = [g for g, c in results.items() if not c]
        # Kafka's quotes, quirks included: ('g1, g2'), and 'g1'g2', ' for the partial success;
        # its maps are HashMaps, so their order.
        def java_order(names):
            return java_hash_order(names, java_string_hash)
        ok, failed = java_order(ok), {g: failed[g] for g in java_order(failed)}
        if not failed:
            print(f"Deletion of requested consumer groups ('{', '.join(ok)}') was successful.")
            return 0
        for g, c in failed.items():      # the ExecutionException Kafka's tool prints
            print(f"* Group '{g}' could not be deleted due to: java.util.concurrent."
                  f"ExecutionException: {exception_class(c)}: {error_text(c)}")
        if ok:
            print(f"\nThese consumer groups were deleted successfully: '{chr(39).join(ok)}', '")
        raise ToolError("Deletion of some consumer groups failed: " +
                        ", ".join(f"'{g}' ({ErrorCode(c).name})" for g, c in failed.items()))

    async def delete_offsets(self) -> int:
        """Kafka's output: a status line, then a TOPIC/PARTITION/STATUS table of every partition
        (a topic that does not exist shows partition "Not Provided"). Failures also exit 1."""
        if not self.opts.group or len(self.opts.group) != 1:
            raise ToolError("Option [delete-offsets] takes exactly one [group]")
        if not self.opts.topic:
            raise ToolError("Option [delete-offsets] takes at least one [topic]")
        group_id = self.opts.group[0]
        tps, missing = await self._partitions_of(self.opts.topic, allow_missing=True)
        top, per = await self.admin.delete_offsets(group_id, tps) if tps else (0, {})
        per = dict(per)
        if top:          # Kafka's partitionResult: every partition asked fails with the group
            per = {tp: per.get(tp) or top for tp in tps}
        sent_failed = any(per.values())       # the headline covers the partitions sent only
        per.update({TopicPartition(t, -1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for t in missing})
        if top == 0 and not sent_failed:
            print(f"Request succeed for deleting offsets with topic {', '.join(self.opts.topic)} group {group_id}")
        else:
            if top in DELETE_OFFSETS_ERRORS:
                message = DELETE_OFFSETS_ERRORS[top].format(group=group_id)
            elif not top or top in PARTITION_LEVEL_ERRORS:
                message = "Encounter some partition level error, see the follow-up details:"
            else:
                message = f"Encounter some unknown error: {ErrorCode(top).name}"
            sys.stderr.write(f"Error: {message}\n")
        fmt = "%-30s %-15s %-15s"
        print("\n" + fmt % ("TOPIC", "PARTITION", "STATUS"))
        for tp in sorted(per, key=lambda tp: tp.topic + str(tp.partition)):
            status = "Successful" if not per[tp] else \
                f"Error: :{exception_class(per[tp])}: {error_text(per[tp])}"     # Kafka's "::"
            print(fmt % (tp.topic, tp.partition if tp.partition >= 0 else "Not Provided", status))
        return 1 if sent_failed or top else 0    # an unknown topic alone: Kafka's "succeed"

    async def _partitions_of(self, specs, allow_missing: bool = False):
        """['t', 't2:0,1'] -> TopicPartitions (every partition of 't'); with allow_missing, also the
        names of topics that do not exist, as ``(partitions, missing)``."""
        out, missing = [], []
        for spec in specs:
            if ":" in spec:
                out += _topic_partitions(spec)
            else:
                topic = spec
                try:
                    meta = await self.cluster.topic_metadata(topic)
                except KafkaError:
                    if allow_missing:
                        missing.append(topic)
                        continue
                    raise ToolError(f"Topic '{topic}' does not exist") from None
                out += [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        return (out, missing) if allow_missing else out

    # --- reset --------------------------------------------------------------------------------

    async def reset(self) -> int:
        """Each group in turn, as Kafka's resetOffsets: an active group is reported and left
        out, the others are reset and printed (exit 1 when one was left out)."""
        o = self.opts
        results = {}
        refused = False
        for group_id in await self.group_ids():
            group = await self.admin.describe_group(group_id)
            state = "Dead" if group.error_code == ErrorCode.GROUP_ID_NOT_FOUND else group.group_state
            if state not in ("Empty", "Dead"):
                sys.stderr.write(f"Error: Assignments can only be reset if the group '{group_id}' is "
                                 f"inactive, but the current state is {state}.\n")
                refused = True
                results[group_id] = {}
                continue
            offsets = await self.plan(group_id)
            if o.execute:
                errors = await self.admin.commit_offsets(group_id, offsets)
                bad = {tp: c for tp, c in errors.items() if c}
                if bad:
                    raise ToolError(", ".join(f"{tp}: {ErrorCode(c).name}" for tp, c in sorted(bad.items())))
            results[group_id] = offsets
        if o.export:
            # Kafka names the group unless exactly one --group was given.
            multi = not (o.group and len(o.group) == 1)
            for group_id, offsets in results.items():
                for tp in sorted(offsets):
                    print((f"{group_id}," if multi else "") + f"{tp.topic},{tp.partition},{offsets[tp]}")
            return 1 if refused else 0
        fmt = "%-30s %-30s %-10s %-15s"
        if results:
            print("\n" + fmt % ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"))
        for group_id, offsets in results.items():
            for tp in sorted(offsets):
                print(fmt % (group_id, tp.topic, tp.partition, offsets[tp]))
        return 1 if refused else 0

    async def plan(self, group_id: str) -> dict:
        o = self.opts
        requested = None
        if o.from_file:
            requested = self._from_file(group_id)       # clamped below, as Kafka's checkOffsetsRange
            if not requested:
                sys.stderr.write(f"Error: No reset plan for group {group_id} found\n")
            tps = sorted(requested)
        elif o.all_topics:
            tps = sorted(await self.admin.fetch_offsets(group_id))
        else:
            tps = await self._partitions_of(o.topic)
        if not tps:
            return {}
        earliest = await self.admin.list_offsets({tp: EARLIEST_TIMESTAMP for tp in tps})
        latest = await self.admin.list_offsets({tp: LATEST_TIMESTAMP for tp in tps})
        for tp in tps:
            if earliest[tp].error_code:
                raise KafkaError(earliest[tp].error_code, f"{tp}: {ErrorCode(earliest[tp].error_code).name}")

        def clamp(tp, offset):
            lo, hi = earliest[tp].offset, latest[tp].offset
            if offset > hi:
                print(f"WARN: New offset ({offset}) is higher than latest offset for topic partition {tp}. "
                      f"Value will be set to {hi}", file=sys.stderr)
                return hi
            if offset < lo:
                print(f"WARN: New offset ({offset}) is lower than earliest offset for topic partition {tp}. "
                      f"Value will be set to {lo}", file=sys.stderr)
                return lo
            return offset
        if requested is not None:
            return {tp: clamp(tp, requested[tp]) for tp in tps}
        if o.to_earliest:
            return {tp: earliest[tp].offset for tp in tps}
        if o.to_latest:
            return {tp: latest[tp].offset for tp in tps}
        if o.to_offset is not None:
            return {tp: clamp(tp, o.to_offset) for tp in tps}
        if o.to_current or o.shift_by is not None:
            committed = await self.admin.fetch_offsets(group_id, tps)
            out = {}
            for tp in tps:
                if tp not in committed:
                    if o.to_current:
                        out[tp] = latest[tp].offset   # Kafka: no committed offset -> latest
                        continue
                    raise ToolError(f"Cannot shift offset for partition {tp} since there is no current "
                                    "committed offset")
                out[tp] = committed[tp][0] if o.to_current else clamp(tp, committed[tp][0] + o.shift_by)
            return out
        if o.to_datetime is not None:
            ts = parse_datetime(o.to_datetime)
        else:
            ts = int(time.time() * 1000) - parse_duration_ms(o.by_duration)
        found = await self.admin.list_offsets({tp: ts for tp in tps})
        out = {}
        for tp in tps:
            if found[tp].error_code or found[tp].offset < 0:
                print(f"Warn: Partition {tp.partition} from topic {tp.topic} is empty. Falling back to latest "
                      "known offset.", file=sys.stderr)
                out[tp] = latest[tp].offset
            else:
                out[tp] = found[tp].offset
        return out

    def _from_file(self, group_id: str) -> dict:
        out = {}
        with open(self.opts.from_file, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                cells = [c.strip() for c in line.strip().split(",")]
                if not line.strip():
                    continue
                try:
                    if len(cells) == 3:
                        topic, partition, offset = cells
                    elif len(cells) == 4:
                        group, topic, partition, offset = cells
                        if group != group_id:
                            continue
                    else:
                        raise ValueError
                    out[TopicPartition(topic, int(partition))] = int(offset)
                except ValueError:
                    raise ToolError(f"Invalid line {n} in {self.opts.from_file}: expected topic,partition,offset") \
                        from None
        return out


SCOPES = "[group], [all-groups]"


def _topic_partitions(spec: str) -> list:
    """Kafka's parseTopicsWithPartitions of 'topic:0,1' (Java's split: 't:' has no partitions,
    't:0,,1' an empty one; both refused with its messages)."""
    fields = java_split(re.compile(":"), spec)
    if len(fields) != 2:
        raise TerseError(f"Invalid topic arg '{spec}', expected topic name and partitions")
    topic, partitions = fields
    out = []
    for p in java_split(re.compile(","), partitions):
        if java_int(p) is None:
            raise TerseError(f"Invalid partition '{p}' specified in topic arg '{spec}''")
        out.append(TopicPartition(topic, java_int(p)))
    return out


# Kafka's reset scenarios, in the order its checkArgs checks each against the others
SCENARIOS = (("to_offset", "to-offset"), ("to_datetime", "to-datetime"),
             ("by_duration", "by-duration"), ("to_earliest", "to-earliest"),
             ("to_latest", "to-latest"), ("to_current", "to-current"),
             ("shift_by", "shift-by"), ("from_file", "from-file"))


def check_args(opts) -> None:
    """Kafka's ConsumerGroupCommandOptions.checkArgs, same messages (before any connection)."""
    action = next(a for a in ("list", "describe", "delete", "reset_offsets", "delete_offsets") if getattr(opts, a))
    flag = "[" + action.replace("_", "-") + "]"
    has_scope = bool(opts.group) or opts.all_groups
    for name, allowed in (("members", ("describe",)), ("offsets", ("describe",)), ("verbose", ("describe",)),
                          ("state", ("describe", "list")), ("type", ("list",))):
        if getattr(opts, name) not in (None, False) and action not in allowed:
            raise ToolError(f"Option(s) [{name}] are unavailable given other options on the command line")
    if action == "describe":
        if not has_scope:
            raise ToolError(f"Option [describe] takes one of these options: {SCOPES}")
        if sum((opts.members, opts.offsets, opts.state is not None)) > 1:
            raise ToolError("Option [describe] takes at most one of these options: [members], [offsets], [state]")
        if opts.state:
            raise ToolError("Option [describe] does not take a value for [state]")
    if action == "delete":
        if not has_scope:
            raise ToolError(f"Option [delete] takes one of these options: {SCOPES}")
        if opts.topic:
            raise ToolError("The consumer does not support topic-specific offset deletion from a consumer group.")
    if action == "delete_offsets" and (not opts.group or not opts.topic):
        raise ToolError("Option [delete-offsets] takes the following options: [group], [topic]")
    if action == "reset_offsets":
        if opts.dry_run and opts.execute:
            raise ToolError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
        if not has_scope:
            raise ToolError(f"Option [reset-offsets] takes one of these options: {SCOPES}")
        o = opts
        given = [flag for attr, flag in SCENARIOS if getattr(o, attr) not in (None, False)]
        if len(given) > 1:
            raise TerseError(f'Option "[{given[0]}]" can\'t be used with option "[{given[1]}]"')
        if not given:          # Kafka's own set order in this message
            raise TerseError("Option '[reset-offsets]' requires one of the following scenarios: "
                             "[[to-offset], [to-current], [to-datetime], [from-file], [by-duration], "
                             "[to-earliest], [to-latest], [shift-by]]")
        if not o.from_file and not o.all_topics and not o.topic:
            raise ToolError("One of the reset scopes should be defined: --all-topics, --topic.")
    if opts.group and opts.all_groups:
        raise ToolError('Option "[group]" can\'t be used with option "[all-groups]"')
    if opts.group and action == "list":
        raise ToolError('Option "[group]" can\'t be used with option "[list]"')
    if opts.topic and action in ("list", "describe"):
        raise ToolError(f'Option "[topic]" can\'t be used with option "{flag}"')


async def run(opts) -> int:
    check_args(opts)
    if opts.reset_offsets and not opts.dry_run and not opts.execute:
        sys.stderr.write("WARN: No action will be performed as the --execute option is missing.In a future major "
                         "release, the default behavior of this command will be to prompt the user before executing "
                         "the reset rather than doing a dry run. You should add the --dry-run option explicitly if you "
                         "are scripting this command and want to keep the current default behavior without "
                         "prompting.\n")
    props = read_properties(opts.command_config) if opts.command_config else {}
    kwargs = client_kwargs(props)
    kwargs.setdefault("default_api_timeout_ms", max(opts.timeout, 1000))
    async with ClusterClient(opts.bootstrap_server, **kwargs) as cluster:
        tool = GroupsTool(Admin(cluster), cluster, opts)
        if opts.list:
            await tool.list()
        elif opts.describe:
            await tool.describe()
        elif opts.delete:
            return await tool.delete()
        elif opts.reset_offsets:
            return await tool.reset()
        elif opts.delete_offsets:
            return await tool.delete_offsets()
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main)
