"""Every tool: --help lists every flag; an unreachable broker, a bad flag or a bad value gives ONE line on
stderr and a non-zero exit status, never a traceback. Runs without a broker."""
import importlib
import os
import pathlib
import socket

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOLS = {
    "kafka-topics.sh": ("topics", ["--list"]),
    "kafka-console-producer.sh": ("console_producer", ["--topic", "t"]),
    "kafka-console-consumer.sh": ("console_consumer", ["--topic", "t"]),
    "kafka-consumer-groups.sh": ("consumer_groups", ["--list"]),
    "kafka-configs.sh": ("configs", ["--describe", "--entity-type", "topics", "--entity-name", "t"]),
    "kafka-get-offsets.sh": ("get_offsets", ["--topic", "t"]),
    "kafka-delete-records.sh": ("delete_records", ["--offset-json-file", "PLAN"]),
    "kafka-log-dirs.sh": ("log_dirs", ["--describe"]),
    "kafka-broker-api-versions.sh": ("broker_api_versions", []),
    "kafka-producer-perf-test.sh": ("producer_perf_test", ["--topic", "t", "--num-records", "1", "--record-size",
                                                           "1", "--throughput", "-1"]),
    "kafka-consumer-perf-test.sh": ("consumer_perf_test", ["--topic", "t", "--messages", "1"]),
    "kafka-dump-log.sh": ("dump_log", ["--files", "00000000000000000000.log"]),
    "kafka-transactions.sh": ("transactions", ["list"]),
    "kafka-reassign-partitions.sh": ("reassign_partitions", ["--list"]),
}


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]     # closed again: nothing listens there


def test_every_script_exists_and_wraps_its_module():
    for name, (module, _) in TOOLS.items():
        path = ROOT / "bin" / name
        assert path.is_file() and os.access(path, os.X_OK), name
        assert f"-m broker.tools.{module} " in path.read_text()


@pytest.mark.parametrize("script", sorted(TOOLS))
def test_help_lists_every_flag(script):
    module = importlib.import_module(f"broker.tools.{TOOLS[script][0]}")
    parser = module.build_parser()
    text = parser.format_help()
    flags = [s for action in parser._actions for s in action.option_strings]
    assert "--help" in flags and "--version" in flags and len(flags) > 2
    for flag in flags:
        assert flag in text, (script, flag)


@pytest.mark.parametrize("script", sorted(TOOLS))
def test_unreachable_broker_or_missing_file_is_one_line(script, tool, tmp_path):
    module, argv = TOOLS[script]
    argv = [str(tmp_path / "00000000000000000000.log") if a == "00000000000000000000.log" else a for a in argv]
    if "PLAN" in argv:
        plan = tmp_path / "plan.json"
        plan.write_text('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 1}')
        argv = [str(plan) if a == "PLAN" else a for a in argv]
    if module != "dump_log":
        flag = "--bootstrap-server"
        if module == "producer_perf_test":
            argv += ["--producer-props", f"bootstrap.servers=127.0.0.1:{dead_port()}",
                     "request.timeout.ms=2000"]
        else:
            argv = [flag, f"127.0.0.1:{dead_port()}"] + argv
    r = tool(module, *argv)
    assert r.code != 0, r
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, r
    assert ("Could not connect" in r.err or "No such file" in r.err), r


def test_unsupported_security_protocol_is_refused(tool, tmp_path):
    config = tmp_path / "client.properties"
    config.write_text("# a client config\nsecurity.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    r = tool("consumer_groups", "--bootstrap-server", "localhost:1", "--list", "--command-config", config)
    assert r.code == 1 and r.err == "Error: security.protocol=SASL_SSL is not supported: these tools speak PLAINTEXT only\n"
    r = tool("console_producer", "--bootstrap-server", "localhost:1", "--topic", "t",
             "--producer-property", "security.protocol=SSL")
    assert r.code == 1 and "security.protocol=SSL is not supported" in r.err


def test_bad_flags_and_values_through_the_scripts(script):
    r = script("kafka-topics.sh", "--bootstrap-server", "localhost:1", "--list", "--no-such-flag")
    assert r.code != 0 and len(r.err.splitlines()) == 1 and "--no-such-flag" in r.err and "Traceback" not in r.err
    r = script("kafka-topics.sh", "--bootstrap-server", "localhost:1", "--create", "--topic", "t",
               "--partitions", "many")
    assert r.code != 0 and len(r.err.splitlines()) == 1 and "many" in r.err
    r = script("kafka-consumer-groups.sh", "--bootstrap-server", "not-a-url", "--list")
    assert r.code != 0 and r.err == "Error: Invalid url in bootstrap.servers: not-a-url\n"
    r = script("kafka-console-producer.sh", "--topic", "t")
    assert r.code != 0 and r.err == "Error: Missing required argument \"[bootstrap-server]\"\n"
    r = script("kafka-get-offsets.sh", "--bootstrap-server", "localhost:1", "--topic", "(")
    assert r.code != 0 and r.err.startswith("Error occurred: Invalid regular expression '(': ") \
        and len(r.err.splitlines()) == 1          # GetOffsetShell's prefix
    r = script("kafka-console-producer.sh", "--bootstrap-server", "localhost:1", "--topic", "t",
               "--request-required-acks", "some")
    assert r.code != 0 and r.err == ("Error: Invalid value some for configuration acks: String must be one of: "
                                     "all, -1, 0, 1\n")
    r = script("kafka-topics.sh", "--bootstrap-server", "localhost:1", "--list", "--command-config", "/no/such/file")
    assert r.code != 0 and r.err == "Error while executing topic command : /no/such/file: No such file or directory\n"
    r = script("kafka-console-producer.sh", "--bootstrap-server", "localhost:1", "--topic", "t",
               "--line-reader", "com.example.CsvReader")
    assert r.code != 0 and r.err == ("Error: Unknown line reader class com.example.CsvReader: only Kafka's "
                                     "LineMessageReader is available\n")
    for flags in (["--entity-type", "brokers", "--entity-name", "zero"], ["--broker", "0x1"],
                  ["--entity-type", "broker-loggers", "--entity-name", "1.5"]):
        r = script("kafka-configs.sh", "--bootstrap-server", "localhost:1", "--describe", *flags)
        kind = "broker-loggers" if "broker-loggers" in flags else "brokers"
        assert r.code == 1 and r.err.endswith(f"The entity name for {kind} must be a valid integer broker id, "
                                              f"but it is: {flags[-1]}\n") and len(r.err.splitlines()) == 1, r
    r = script("kafka-topics.sh", "--version")       # like Kafka, answered before the required flags are checked
    assert r.code == 0 and r.out.strip() and r.err == ""
    r = script("kafka-producer-perf-test.sh", "--help")
    assert r.code == 0 and "--num-records" in r.out and "--producer-props" in r.out


@pytest.mark.parametrize("argv, message", [
    (["--describe"], "Option [describe] takes one of these options: [group], [all-groups]"),
    (["--describe", "--group", "g", "--members", "--state"],
     "Option [describe] takes at most one of these options: [members], [offsets], [state]"),
    (["--describe", "--group", "g", "--state", "Stable"], "Option [describe] does not take a value for [state]"),
    (["--delete", "--group", "g", "--topic", "t"],
     "The consumer does not support topic-specific offset deletion from a consumer group."),
    (["--delete-offsets", "--group", "g"], "Option [delete-offsets] takes the following options: [group], [topic]"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--dry-run", "--execute"],
     "Option [reset-offsets] only accepts one of [execute] and [dry-run]"),
    (["--reset-offsets", "--all-topics", "--to-earliest"],
     "Option [reset-offsets] takes one of these options: [group], [all-groups]"),
    (["--reset-offsets", "--group", "g", "--to-earliest"],
     "One of the reset scopes should be defined: --all-topics, --topic."),
    (["--list", "--members"], "Option(s) [members] are unavailable given other options on the command line"),
    (["--list", "--group", "g"], 'Option "[group]" can\'t be used with option "[list]"'),
    (["--describe", "--group", "g", "--all-groups"], 'Option "[group]" can\'t be used with option "[all-groups]"'),
])
def test_consumer_groups_argument_checks_as_kafka(tool, argv, message):
    """Kafka's checkArgs messages, before any connection (the port is closed: no network needed)."""
    r = tool("consumer_groups", "--bootstrap-server", f"127.0.0.1:{dead_port()}", *argv)
    assert (r.code, r.out, r.err) == (1, "", f"Error: {message}\n")


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_zookeeper_flag_says_it_was_removed(name, script):
    """A runbook from Kafka 2.x passes --zookeeper: one line saying why it is refused and what
    to use instead, as Kafka 3.x's tools refuse the removed option."""
    r = script(name, "--zookeeper", "localhost:2181", *TOOLS[name][1])
    assert r.code == 1, r
    if name == "kafka-configs.sh":       # Kafka 3.9's still takes it (deprecated), for users/brokers
        assert r.err == (f"{name}: error: --zookeeper is not supported by this kafka-configs.sh, "
                         f"which talks to a broker: use --bootstrap-server HOST:PORT\n"), r
        return
    assert r.err == (f"{name}: error: zookeeper is not a recognized option: Kafka 3.0 removed "
                     f"--zookeeper from its tools, which talk to a broker instead; use "
                     f"--bootstrap-server HOST:PORT\n"), r


@pytest.mark.parametrize("script_name", sorted(set(TOOLS) - {"kafka-transactions.sh",
                                                           "kafka-producer-perf-test.sh"}
                                                | {"kafka-leader-election.sh"}))
def test_no_arguments_print_every_option_and_exit_1(script, script_name):
    """Kafka's maybePrintHelpOrVersion / printUsageAndExit: the usage on stderr, exit 1."""
    r = script(script_name)
    assert r.code == 1 and r.out == "", r
    assert r.err.startswith("usage: ") and "--version" in r.err and len(r.err.splitlines()) > 5


def test_producer_perf_test_without_arguments_prints_its_help(script):
    r = script("kafka-producer-perf-test.sh")          # argparse4j's printHelp, exit 0
    assert r.code == 0 and r.out.startswith("usage: ") and "--transaction-duration-ms" in r.out
