"""kafka-consumer-groups against a live broker: lag columns, members, state, offset resets, deletes."""
import asyncio
import re

from broker.client.cluster import ClusterClient
from broker.client.consumer import Consumer
from broker.client.producer import Producer
from broker.client.types import TopicPartition


def produce(bootstrap, topic, per_partition: dict):
    async def go():
        async with ClusterClient(bootstrap) as cluster:
            producer = Producer(cluster, linger_ms=0)
            for partition, count in per_partition.items():
                for i in range(count):
                    await producer.send(topic, b"v%d" % i, partition=partition)
            await producer.close()
    asyncio.run(go())


def commit(bootstrap, group, offsets: dict):
    """Commit offsets as a group member would (assign mode, no membership)."""
    async def go():
        async with ClusterClient(bootstrap) as cluster:
            consumer = Consumer(cluster, group_id=group, enable_auto_commit=False)
            await consumer.commit({TopicPartition(*tp): o for tp, o in offsets.items()})
    asyncio.run(go())


def table(lines):
    """The rows of a ConsumerGroupCommand table, split on whitespace, header first."""
    return [l.split() for l in lines if l.strip()]


def test_describe_lag_and_reset(tools_broker, tool):
    b = tools_broker.bootstrap
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "lagged", "--partitions", 2).code == 0
    produce(b, "lagged", {0: 5, 1: 3})
    commit(b, "g-lag", {("lagged", 0): 2, ("lagged", 1): 3})

    r = tool("consumer_groups", "--bootstrap-server", b, "--describe", "--group", "g-lag")
    assert r.code == 0, r
    assert r.out.startswith("\nGROUP ")
    rows = table(r.lines)
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                       "HOST", "CLIENT-ID"]
    assert rows[1:] == [["g-lag", "lagged", "0", "2", "5", "3", "-", "-", "-"],
                        ["g-lag", "lagged", "1", "3", "3", "0", "-", "-", "-"]]
    # Kafka's column layout: %-15s for group/topic, %-10s partition, %-15s for the numbers
    assert r.lines[2].startswith("g-lag           lagged          0          2               5               3")
    assert "Consumer group 'g-lag' has no active members." in r.err

    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-lag", "--topic", "lagged",
             "--to-earliest")   # dry run by default
    rows = table(r.lines)
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert rows[1:] == [["g-lag", "lagged", "0", "0"], ["g-lag", "lagged", "1", "0"]]
    assert table(tool("consumer_groups", "--bootstrap-server", b, "--describe", "--group", "g-lag").lines)[1][3] == "2"

    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-lag", "--topic", "lagged:0",
             "--shift-by", 2, "--execute")
    assert table(r.lines)[1:] == [["g-lag", "lagged", "0", "4"]]
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-lag", "--all-topics",
             "--to-offset", 100, "--execute")
    assert table(r.lines)[1:] == [["g-lag", "lagged", "0", "5"], ["g-lag", "lagged", "1", "3"]]   # clamped
    assert "higher than latest offset" in r.err
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-lag", "--topic", "lagged",
             "--to-datetime", "2000-01-01T00:00:00.000", "--execute")
    assert table(r.lines)[1:] == [["g-lag", "lagged", "0", "0"], ["g-lag", "lagged", "1", "0"]]
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-lag", "--topic", "lagged",
             "--to-latest", "--execute", "--export")
    assert r.lines == ["lagged,0,5", "lagged,1,3"]
    rows = table(tool("consumer_groups", "--bootstrap-server", b, "--describe", "--group", "g-lag").lines)
    assert [row[3:6] for row in rows[1:]] == [["5", "5", "0"], ["3", "3", "0"]]


def test_reset_from_file_and_delete_offsets(tools_broker, tool, tmp_path):
    b = tools_broker.bootstrap
    produce(b, "filed", {0: 4})
    plan = tmp_path / "plan.csv"
    plan.write_text("filed,0,1000\n")                 # past the end: clamped, as Kafka does
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-file",
             "--from-file", plan)
    assert table(r.lines)[1:] == [["g-file", "filed", "0", "4"]] and "higher than latest" in r.err
    plan.write_text("filed,0,1\n")
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-file",
             "--from-file", plan, "--execute")
    assert table(r.lines)[1:] == [["g-file", "filed", "0", "1"]]
    r = tool("consumer_groups", "--bootstrap-server", b, "--delete-offsets", "--group", "g-file", "--topic", "filed")
    assert r.code == 0, r
    # Kafka 3.x's wording (sic) and its "%-30s %-15s %-15s" table
    assert r.lines[0] == "Request succeed for deleting offsets with topic filed group g-file"
    assert r.lines[1:] == ["", "TOPIC                          PARTITION       STATUS         ",
                           "filed                          0               Successful     "]
    # an unknown topic is not sent: the request for the rest succeeds, its row says why (Kafka
    # 3.9's "Error: :<exception>: <message>"), exit 0 as Kafka's
    r = tool("consumer_groups", "--bootstrap-server", b, "--delete-offsets", "--group", "g-file", "--topic", "gone")
    assert r.code == 0 and r.err == "", r
    assert r.lines[0] == "Request succeed for deleting offsets with topic gone group g-file"
    assert r.lines[3] == ("gone                           Not Provided    Error: :org.apache.kafka.common."
                          "errors.UnknownTopicOrPartitionException: This server does not host this "
                          "topic-partition."), r.lines
    # a group that does not exist: every partition asked fails with the group's exception
    r = tool("consumer_groups", "--bootstrap-server", b, "--delete-offsets", "--group", "no-such-group",
             "--topic", "filed")
    assert r.code == 1, r
    assert r.lines[-1] == ("filed                          0               Error: :org.apache.kafka.common."
                           "errors.GroupIdNotFoundException: The group id does not exist."), r.lines

    # those were the Empty group's last offsets: it is gone (Kafka's cleanupGroupMetadata)
    r = tool("consumer_groups", "--bootstrap-server", b, "--describe", "--group", "g-file", "--members")
    assert (r.code, r.err) == (1, "Error: Consumer group 'g-file' does not exist.\n")
    # an empty group: --members prints the notice and an empty table
    plan.write_text("filed,0,2\n")
    tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-file",
         "--from-file", plan, "--execute")
    r = tool("consumer_groups", "--bootstrap-server", b, "--describe", "--group", "g-file", "--members")
    # Kafka 3.9's printMembers: the notice, and the header still
    assert r.code == 0 and "Consumer group 'g-file' has no active members." in r.err
    assert r.out == ("\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     "
                     "\n"), r


def test_members_state_list_and_delete(tools_broker, tool):
    b = tools_broker.bootstrap
    produce(b, "live", {0: 2})

    async def with_member():
        async with ClusterClient(b, client_id="member-client") as cluster:
            consumer = Consumer(cluster, group_id="g-live", auto_offset_reset="earliest")
            consumer.subscribe(["live"])
            got = []
            for _ in range(50):
                got += await consumer.poll(200)
                if len(got) >= 2:
                    break
            await consumer.commit()
            loop = asyncio.get_running_loop()
            members = await loop.run_in_executor(None, tool, "consumer_groups", "--bootstrap-server", b,
                                                 "--describe", "--group", "g-live", "--members", "--verbose")
            state = await loop.run_in_executor(None, tool, "consumer_groups", "--bootstrap-server", b,
                                               "--describe", "--group", "g-live", "--state")
            offsets = await loop.run_in_executor(None, tool, "consumer_groups", "--bootstrap-server", b,
                                                 "--describe", "--group", "g-live")
            listed = await loop.run_in_executor(None, tool, "consumer_groups", "--bootstrap-server", b,
                                                "--list", "--state", "Stable")
            busy = await loop.run_in_executor(None, tool, "consumer_groups", "--bootstrap-server", b,
                                              "--reset-offsets", "--group", "g-live", "--group",
                                              "g-spare", "--topic", "live", "--to-earliest",
                                              "--execute")
            await consumer.close()
            return len(got), members, state, offsets, listed, busy
    n, members, state, offsets, listed, busy = asyncio.run(with_member())
    assert n == 2
    rows = table(members.lines)
    assert rows[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    assert rows[1][0] == "g-live" and rows[1][1].startswith("member-client-") and rows[1][3] == "member-client"
    assert rows[1][4:] == ["1", "live(0)"]
    rows = table(state.lines)
    # Kafka's "\n%-Ns %-25s %-20s %-15s %s" where N = max(25, len(coordinator)) -- GROUP takes that width
    assert state.out.startswith("\nGROUP ") and state.out.endswith("\n") and not state.out.endswith("\n\n")
    coordinator = "  ".join(rows[1][1:3])                  # Kafka's "host:port  (id)"
    width = max(25, len(coordinator))
    assert state.lines[1] == "%-*s %-25s %-20s %-15s %s" % (width, "GROUP", "COORDINATOR (ID)",
                                                             "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
    assert state.lines[2] == "%-*s %-25s %-20s %-15s %s" % (width, "g-live", coordinator, "range", "Stable", 1)
    assert re.fullmatch(r"127\.0\.0\.1:\d+  \(\d+\)", coordinator)
    rows = table(offsets.lines)
    assert rows[1][:6] == ["g-live", "live", "0", "2", "2", "0"] and rows[1][6].startswith("member-client-")
    assert table(listed.lines) == [["GROUP", "STATE"], ["g-live", "Stable"]]
    assert listed.lines[1] == "%-25s %-20s" % ("g-live", "Stable")       # width max(15, longest) + 10
    r = tool("consumer_groups", "--bootstrap-server", b, "--list", "--type", "--state")
    width = len(r.lines[0]) - 42     # GROUP column, then " %-20s" twice
    assert r.lines[0] == "%-*s %-20s %-20s" % (width, "GROUP", "TYPE", "STATE")
    assert "%-*s %-20s %-20s" % (width, "g-live", "Classic", "Empty") in r.lines     # its member has left
    r = tool("consumer_groups", "--bootstrap-server", b, "--list", "--type", "consumer")
    assert r.lines == ["%-25s %-20s" % ("GROUP", "TYPE")]      # every group here is a classic one
    assert busy.code == 1 and busy.err == ("Error: Assignments can only be reset if the group 'g-live' is inactive, "
                                           "but the current state is Stable.\n")
    # Kafka goes on with the other groups: g-spare (no members) is reset and printed.
    assert table(busy.lines)[1:] == [["g-spare", "live", "0", "0"]]

    r = tool("consumer_groups", "--bootstrap-server", b, "--list")
    assert "g-live" in r.lines
    # Kafka 3.9's states include KIP-848's (no classic group is in them)
    r = tool("consumer_groups", "--bootstrap-server", b, "--list", "--state", "assigning,Reconciling")
    assert (r.code, r.lines) == (0, ["%-25s %-20s" % ("GROUP", "STATE")]), r
    # a group named twice is deleted once (Kafka's admin key sets)
    r = tool("consumer_groups", "--bootstrap-server", b, "--delete", "--group", "g-live", "--group", "g-live")
    assert r.out == "Deletion of requested consumer groups ('g-live') was successful.\n", r
    r = tool("consumer_groups", "--bootstrap-server", b, "--delete", "--group", "g-live")
    assert r.code == 1 and r.lines[0] == (
        "* Group 'g-live' could not be deleted due to: java.util.concurrent.ExecutionException: "
        "org.apache.kafka.common.errors.GroupIdNotFoundException: The group id does not exist."), r
    r = tool("consumer_groups", "--bootstrap-server", b, "--describe", "--group", "g-live")
    assert r.code == 1 and r.err == "Error: Consumer group 'g-live' does not exist.\n"
    # several groups: a missing one does not hide the others, and is still reported (one line, exit 1)
    r = tool("consumer_groups", "--bootstrap-server", b, "--describe", "--group", "a-missing", "--group", "g-lag")
    assert r.code == 1 and table(r.lines)[1][0] == "g-lag"
    assert r.err.splitlines()[-1] == "Error: Consumer group 'a-missing' does not exist."


def test_reset_current_duration_and_multi_group_file(tools_broker, tool, tmp_path):
    b = tools_broker.bootstrap
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "modes", "--partitions", 2).code == 0
    produce(b, "modes", {0: 6, 1: 4})
    commit(b, "g-modes", {("modes", 0): 3})
    # --to-current: the committed offset, or the log end offset where nothing is committed (Kafka's rule)
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-modes", "--topic", "modes",
             "--to-current")
    assert r.code == 0, r
    assert table(r.lines)[1:] == [["g-modes", "modes", "0", "3"], ["g-modes", "modes", "1", "4"]]
    # --by-duration: everything was written within the last hour, so the earliest offset
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-modes", "--topic", "modes",
             "--by-duration", "PT1H", "--execute")
    assert table(r.lines)[1:] == [["g-modes", "modes", "0", "0"], ["g-modes", "modes", "1", "0"]]
    # a negative duration (Java's Duration.parse: "-PT1H", "PT-1H"; the value may start with a dash)
    # is an hour ahead: no offset that late, so the latest
    for duration in ("-PT1H", "PT-1H", "P-1DT0,5S"):
        r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-modes", "--topic",
                 "modes:1", "--by-duration", duration)
        assert (r.code, table(r.lines)[1:]) == (0, [["g-modes", "modes", "1", "4"]]), (duration, r)
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-modes", "--topic",
             "modes:1", "--by-duration", "PT0.5M")     # only seconds take a fraction
    assert r.code == 1 and "Invalid duration 'PT0.5M'" in r.err
    # --to-datetime in the future: no such offset, so Kafka falls back to the latest, with a warning
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-modes", "--topic",
             "modes:1", "--to-datetime", "2999-01-01T00:00:00.000")
    assert table(r.lines)[1:] == [["g-modes", "modes", "1", "4"]]
    assert "Warn: Partition 1 from topic modes is empty. Falling back to latest known offset." in r.err
    # --shift-by below the log start offset is clamped to it
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-modes", "--topic",
             "modes:0", "--shift-by", -10)
    assert table(r.lines)[1:] == [["g-modes", "modes", "0", "0"]] and "lower than earliest offset" in r.err
    # the multi-group CSV form: group,topic,partition,offset; --export writes the same form back
    commit(b, "g-other", {("modes", 0): 1})
    plan = tmp_path / "groups.csv"
    plan.write_text("g-modes,modes,0,5\ng-other,modes,1,2\n")
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-modes", "--group",
             "g-other", "--from-file", plan, "--execute", "--export")
    assert r.code == 0, r
    assert sorted(r.lines) == ["g-modes,modes,0,5", "g-other,modes,1,2"]
    rows = table(tool("consumer_groups", "--bootstrap-server", b, "--describe", "--group", "g-other").lines)
    assert [row[1:4] for row in rows[1:]] == [["modes", "0", "1"], ["modes", "1", "2"]]
    r = tool("consumer_groups", "--bootstrap-server", b, "--delete", "--group", "g-other", "--group", "g-modes")
    # Kafka's quoting of several groups, in its HashMap's order
    assert r.out == "Deletion of requested consumer groups ('g-other, g-modes') was successful.\n", r
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-modes", "--topic", "modes",
             "--to-earliest", "--to-latest")
    assert (r.code, r.err) == (1, 'Option "[to-earliest]" can\'t be used with option "[to-latest]"\n')
    r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-modes", "--topic", "modes")
    assert (r.code, r.err) == (1, "Option '[reset-offsets]' requires one of the following scenarios: "
                                  "[[to-offset], [to-current], [to-datetime], [from-file], [by-duration], "
                                  "[to-earliest], [to-latest], [shift-by]]\n")
    for spec, error in (("modes:", "Invalid topic arg 'modes:', expected topic name and partitions"),
                        ("modes:0,,1", "Invalid partition '' specified in topic arg 'modes:0,,1''"),
                        ("modes:x", "Invalid partition 'x' specified in topic arg 'modes:x''")):
        r = tool("consumer_groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g-modes",
                 "--topic", spec, "--to-earliest", "--dry-run")
        assert (r.code, r.err) == (1, error + "\n"), r


def test_static_member_shows_group_instance_id(tools_broker, tool, script):
    """A console consumer with group.instance.id (and a Kafka assignor class name) stays a member after
    it exits, as static members do; --members then has Kafka's GROUP-INSTANCE-ID column (width >= 17)."""
    b = tools_broker.bootstrap
    produce(b, "static", {0: 2})
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "static", "--group", "g-static",
               "--from-beginning", "--max-messages", 2, "--timeout-ms", 10000,
               "--consumer-property", "group.instance.id=inst-1", "--consumer-property", "client.id=static-cli",
               "--consumer-property", "partition.assignment.strategy=org.apache.kafka.clients.consumer.RoundRobinAssignor")
    assert r.lines == ["v0", "v1"], r
    r = tool("consumer_groups", "--bootstrap-server", b, "--describe", "--group", "g-static", "--members")
    assert r.code == 0, r
    header, row = r.lines[1], r.lines[2]
    member = row.split()[1]
    assert member.startswith("inst-1-")
    widths = (15, len(member), 17, 15, 15, 15)
    assert header == "".join(f"{h:<{w}} " for h, w in zip(
        ("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"), widths))
    assert row.split()[2:] == ["inst-1", "/127.0.0.1", "static-cli", "1"]
    r = tool("consumer_groups", "--bootstrap-server", b, "--describe", "--group", "g-static", "--state")
    assert r.lines[2].split()[3:] == ["roundrobin", "Stable", "1"]


def test_a_datetime_without_a_zone_is_utc(monkeypatch):
    # Kafka's Utils.getDateTime appends "Z" when the time part names no zone.
    import time

    from broker.tools.consumer_groups import parse_datetime
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert parse_datetime("2024-01-01T00:00:00.000") == 1704067200000
        assert parse_datetime("2024-01-01T00:00:00.000Z") == 1704067200000
        assert parse_datetime("2024-01-01T01:00:00.000+01:00") == 1704067200000
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
