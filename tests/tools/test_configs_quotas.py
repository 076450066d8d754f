"""kafka-configs.sh for users, clients and ips (client quotas) against a broker subprocess: Kafka 3.x's
flags and output lines, persistence across a restart, and the tool's errors.

The Java formatting helpers are checked against values printed by OpenJDK 17 (Double.toString, and
java.util.HashMap iteration orders of the maps Kafka's admin client builds)."""
import pytest

from broker.tools.client_quotas import entity_hash, java_double
from broker.tools.javautil import java_hash_order, java_string_hash


# -- Java's formatting (golden values from OpenJDK 17) -------------------------------------------

@pytest.mark.parametrize("value, text", [
    (1024.0, "1024.0"), (10485760.0, "1.048576E7"), (1e7, "1.0E7"), (9999999.0, "9999999.0"),
    (0.001, "0.001"), (0.0005, "5.0E-4"), (12.5, "12.5"), (1e-5, "1.0E-5"), (123456789.0, "1.23456789E8"),
    (1.5e300, "1.5E300"), (100.0, "100.0"), (2147483647.0, "2.147483647E9")])
def test_java_double(value, text):
    assert java_double(value) == text


@pytest.mark.parametrize("keys, order", [
    (["producer_byte_rate", "consumer_byte_rate"], ["consumer_byte_rate", "producer_byte_rate"]),
    (["producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"],
     ["producer_byte_rate", "consumer_byte_rate", "controller_mutation_rate", "request_percentage"]),
    (["request_percentage", "controller_mutation_rate", "consumer_byte_rate"],
     ["consumer_byte_rate", "controller_mutation_rate", "request_percentage"]),
    (["controller_mutation_rate", "producer_byte_rate", "request_percentage"],
     ["controller_mutation_rate", "producer_byte_rate", "request_percentage"])])
def test_value_order_is_javas_hashmap_order(keys, order):
    assert java_hash_order(keys, java_string_hash, len(keys)) == order


def test_entity_order_is_javas_hashmap_order():
    entities = [[("user", "alice")], [("user", None)], [("user", "alice"), ("client-id", "c1")],
                [("client-id", None)], [("client-id", "c1")], [("user", None), ("client-id", None)],
                [("user", "bob")], [("user", "alice"), ("client-id", None)]]
    java = {4: [0, 3, 1, 2], 5: [4, 0, 3, 1, 2], 8: [5, 4, 0, 7, 6, 3, 1, 2]}
    for n, order in java.items():
        assert java_hash_order(range(n), lambda i: entity_hash(entities[i]), n) == order


# -- against the broker ---------------------------------------------------------------------------

def configs(script, broker, *argv):
    r = script("kafka-configs.sh", "--bootstrap-server", broker.bootstrap, *argv)
    assert r.code == 0 and r.err == "", r
    return r.lines


USERS = ["Quota configs for user-principal 'alice' are producer_byte_rate=1024.0",
         "Quota configs for the default user-principal are consumer_byte_rate=1.048576E7"]


def test_alter_describe_and_restart(broker_process, script):
    b = broker_process()
    assert configs(script, b, "--alter", "--entity-type", "users", "--entity-name", "alice",
                   "--add-config", "producer_byte_rate=1024") == ["Completed updating config for user alice."]
    assert configs(script, b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                   "clients", "--entity-name", "c1", "--add-config", "producer_byte_rate=2048,consumer_byte_rate=4096"
                   ) == ["Completed updating config for user alice."]
    assert configs(script, b, "--alter", "--user-defaults", "--add-config", "consumer_byte_rate=10485760") == [
        "Completed updating default config for users in the cluster."]
    assert configs(script, b, "--alter", "--entity-type", "clients", "--entity-default", "--add-config",
                   "request_percentage=12.5,producer_byte_rate=100") == [
        "Completed updating default config for clients in the cluster."]
    assert configs(script, b, "--alter", "--ip", "127.0.0.1", "--add-config", "connection_creation_rate=10") == [
        "Completed updating config for ip 127.0.0.1."]

    def describe_all():
        return {
            "users": configs(script, b, "--describe", "--entity-type", "users"),
            "alice": configs(script, b, "--describe", "--entity-type", "users", "--entity-name", "alice"),
            "alice-c1": configs(script, b, "--describe", "--entity-type", "users", "--entity-name", "alice",
                                "--entity-type", "clients", "--entity-name", "c1"),
            "clients": configs(script, b, "--describe", "--entity-type", "clients"),
            "ips": configs(script, b, "--describe", "--entity-type", "ips"),
        }
    expected = {
        "users": USERS,                          # strict: not alice's client entity
        "alice": USERS[:1],
        "alice-c1": ["Quota configs for user-principal 'alice', client-id 'c1' are "
                     "consumer_byte_rate=4096.0, producer_byte_rate=2048.0"],
        "clients": ["Quota configs for the default client-id are producer_byte_rate=100.0, request_percentage=12.5"],
        "ips": ["Quota configs for ip '127.0.0.1' are connection_creation_rate=10.0"],
    }
    assert describe_all() == expected
    b.restart()                                  # persisted in the metadata store
    assert describe_all() == expected

    assert configs(script, b, "--alter", "--user", "alice", "--client", "c1", "--delete-config",
                   "consumer_byte_rate") == ["Completed updating config for client c1."]   # Kafka: first type given
    assert configs(script, b, "--describe", "--user", "alice", "--client", "c1") == [
        "Quota configs for user-principal 'alice', client-id 'c1' are producer_byte_rate=2048.0"]
    assert configs(script, b, "--alter", "--entity-type", "users", "--entity-name", "alice", "--delete-config",
                   "producer_byte_rate") == ["Completed updating config for user alice."]
    assert configs(script, b, "--describe", "--entity-type", "users") == USERS[1:]


@pytest.mark.parametrize("argv, error", [
    (["--alter", "--entity-type", "users", "--entity-name", "bob", "--add-config", "foo=1"],
     "Only quota and SCRAM credential configs can be added for 'users' using --bootstrap-server. "
     "Unexpected config names: Set(foo)"),
    (["--alter", "--entity-type", "clients", "--entity-name", "x", "--add-config", "connection_creation_rate=1"],
     "Only quota configs can be added for 'clients' using --bootstrap-server. Unexpected config names: "
     "Set(connection_creation_rate)"),
    (["--alter", "--entity-type", "ips", "--entity-name", "10.1.2.3", "--add-config", "producer_byte_rate=5"],
     "Only connection quota configs can be added for 'ips' using --bootstrap-server. Unexpected config names: "
     "producer_byte_rate"),
    (["--alter", "--client", "x", "--add-config", "producer_byte_rate=abc"],
     "Cannot parse quota configuration value for producer_byte_rate: abc"),
    (["--alter", "--client", "x", "--add-config", "producer_byte_rate=0"],
     "Quota producer_byte_rate must be greater than 0"),
    (["--alter", "--client", "x", "--add-config", "consumer_byte_rate=1.5"],
     "consumer_byte_rate cannot be a fractional value."),
    (["--alter", "--client", "x", "--delete-config", "producer_byte_rate"], "Invalid config(s): producer_byte_rate"),
    (["--alter", "--entity-type", "users", "--entity-type", "users", "--entity-name", "a", "--entity-name", "b",
      "--add-config", "producer_byte_rate=1"], "Duplicate entity type(s) specified: users"),
    (["--describe", "--entity-type", "users", "--entity-type", "ips"],
     "Only 'users' and 'clients' entity types may be specified together"),
    (["--alter", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "a", "--add-config",
      "producer_byte_rate=1"], "An entity name must be specified for every entity type"),
    (["--alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"],
     "an entity-name or default entity must be specified with --alter of users, clients, brokers or ips"),
    (["--describe", "--entity-type", "users", "--user", "a"], "Duplicate entity type(s) specified: users"),
    (["--describe", "--entity-type", "clients", "--user", "a"],
     "--entity-{type,name,default} should not be used in conjunction with specific entity flags"),
    (["--describe", "--topic", "t", "--user", "a"], "Only 'users' and 'clients' entity types may be specified together"),
    (["--alter", "--ip", "no.such.host.invalid", "--add-config", "connection_creation_rate=1"],
     "The entity name for ips must be a valid IP or resolvable host, but it is: no.such.host.invalid"),
    (["--alter", "--user", "a", "--add-config", "SCRAM-SHA-256=[password=x]"],
     "The broker does not support SCRAM credentials (AlterUserScramCredentials)"),
    # The broker's INVALID_REQUEST for dynamic changes Kafka refuses as it reconfigures.
    (["--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
      "log.cleaner.threads=0"],
     "Invalid value 0 for configuration log.cleaner.threads: Log cleaner threads should be "
     "at least 1"),
    (["--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
      "num.replica.fetchers=10"],
     "Invalid value 10 for configuration num.replica.fetchers: Dynamic thread count update "
     "validation failed for num.replica.fetchers=10, value should not be greater than double "
     "the current value 1"),
    (["--alter", "--entity-type", "brokers", "--entity-default", "--add-config", "log.roll.ms=0"],
     "Invalid value 0 for configuration log.roll.ms: log.roll.ms must be greater than or "
     "equal to 1"),
    # a replication throttle that is not a number (the reassignment runbook's rates)
    (["--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
      "leader.replication.throttled.rate=fast"],
     "Invalid value fast for configuration leader.replication.throttled.rate: Not a number of "
     "type LONG"),
    (["--alter", "--entity-type", "brokers", "--entity-name", "0", "--add-config",
      "follower.replication.throttled.rate=10MB"],
     "Invalid value 10MB for configuration follower.replication.throttled.rate: Not a number of "
     "type LONG"),
])
def test_errors_are_one_line(tools_broker, tool, argv, error):
    """Kafka's ConfigCommand prints the message of an argument or config error bare; a
    broker's refusal (and what this broker lacks) is one 'Error: ' line here."""
    r = tool("configs", "--bootstrap-server", tools_broker.bootstrap, *argv)
    broker_side = ("Invalid value", "The broker does not", "Quota ", "consumer_byte_rate cannot")
    prefix = "Error: " if error.startswith(broker_side) else ""
    assert (r.code, r.out, r.err) == (1, "", f"{prefix}{error}\n")


def test_scram_credentials_are_listed_like_kafka(capsys):
    """Against a broker that has SCRAM users (Apache Kafka), describing users lists them as Kafka's tool."""
    import asyncio

    from protocol.messages import DescribeUserScramCredentialsResponse as R

    from broker.tools.client_quotas import describe_scram

    class Cluster:
        async def send(self, node, request):
            assert [u.name for u in request.users] == ["alice", "bob", "carol"]
            return R(results=[
                R.DescribeUserScramCredentialsResult(user="alice", credential_infos=[
                    R.CredentialInfo(mechanism=1, iterations=4096), R.CredentialInfo(mechanism=2, iterations=8192)]),
                R.DescribeUserScramCredentialsResult(user="bob", error_code=91, error_message="none"),
                R.DescribeUserScramCredentialsResult(user="carol", error_code=92, error_message="twice")])
    asyncio.run(describe_scram(Cluster(), ["alice", "bob", "carol"]))
    assert capsys.readouterr().out.splitlines() == [
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096, "
        "SCRAM-SHA-512=iterations=8192",
        "Error retrieving SCRAM credential configs for user-principal 'carol': DuplicateResourceException: twice"]


@pytest.mark.parametrize("argv, error", [
    (["--describe", "--topic", "t", "--add-config", "a=b"],
     'Option "[describe]" can\'t be used with option "[add-config]"'),
    (["--describe", "--topic", "t", "--delete-config", "a"],
     'Option "[describe]" can\'t be used with option "[delete-config]"'),
    (["--describe", "--entity-type", "topics", "--entity-type", "brokers"],
     "Only 'users' and 'clients' entity types may be specified together"),
    (["--describe", "--entity-type", "topics", "--topic", "t"],
     "Duplicate entity type(s) specified: topics"),
    (["--describe", "--entity-type", "brokers", "--topic", "t"],
     "Only 'users' and 'clients' entity types may be specified together"),
    (["--describe", "--topic", "t", "--entity-name", "x"],
     "--entity-{type,name,default} should not be used in conjunction with specific entity flags"),
    (["--describe", "--topic", "a", "--topic", "b"],
     "Found multiple arguments for option topic, but you asked for only one"),
    (["--alter", "--entity-type", "topics", "--entity-name", "a", "--entity-name", "b",
      "--add-config", "retention.ms=1"], "An entity name must be specified for every entity type"),
    (["--alter", "--entity-type", "topics", "--entity-default", "--add-config", "retention.ms=1"],
     "an entity name must be specified with --alter of topics"),
    (["--describe", "--entity-type", "broker-loggers"],
     "an entity name must be specified with --describe of broker-loggers"),
    (["--describe"], "At least one entity type must be specified"),
    (["--describe", "--entity-type", "brokers", "--entity-name", "0", "--entity-name", "1"],
     "Found multiple arguments for option entity-name, but you asked for only one"),
    (["--describe", "--entity-type", "users", "--entity-type", "users", "--entity-type", "users"],
     "Duplicate entity type(s) specified: users,users"),
    (["--alter", "--topic", "t"],
     "At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter"),
])
def test_option_combinations_kafka_refuses(tools_broker, tool, argv, error):
    """ConfigCommandOptions.checkArgs, in its order: these were described or altered silently
    (the first entity given won, the rest was ignored)."""
    r = tool("configs", "--bootstrap-server", tools_broker.bootstrap, *argv)
    assert (r.code, r.out, r.err) == (1, "", f"{error}\n")


def test_broker_defaults_describes_only_the_defaults(tools_broker, tool):
    """--broker-defaults is the default entity (""), as --entity-type brokers --entity-default:
    it printed every broker's section before the defaults."""
    b = tools_broker.bootstrap
    assert tool("configs", "--bootstrap-server", b, "--alter", "--broker-defaults", "--add-config",
                "log.cleaner.threads=2").code == 0
    try:
        for flags in (["--broker-defaults"], ["--entity-type", "brokers", "--entity-default"]):
            r = tool("configs", "--bootstrap-server", b, "--describe", *flags)
            assert r.code == 0 and r.lines[0] == "Default configs for brokers in the cluster are:", r
            assert len(r.lines) == 2 and r.lines[1].startswith("  log.cleaner.threads=2 "), r
        r = tool("configs", "--bootstrap-server", b, "--describe", "--entity-type", "brokers")
        assert r.lines[0] == "Dynamic configs for broker 0 are:"
        assert "Default configs for brokers in the cluster are:" in r.lines
    finally:
        tool("configs", "--bootstrap-server", b, "--alter", "--broker-defaults", "--delete-config",
             "log.cleaner.threads")


@pytest.mark.parametrize("text, expected", [
    ("k1=v1,k2=[v1,v2],k3=v3", {"k1": "v1", "k2": "v1,v2", "k3": "v3"}),
    ("a=[x=y]", {"a": "x=y"}),
    ("a=", {"a": ""}),                       # an empty value (ssl.endpoint.identification...=)
    ("a = 1 , b=2,", {"a": "1", "b": "2"}),
    ("a=x[1]", {"a": "x1"}),                 # every bracket goes, as Kafka's replaceAll
    ("a=1=2", None), ("a=[1,2]=3", None), ("k=[a,b", None), ("", None), ("novalue", None),
])
def test_add_config_is_split_as_kafka_splits_it(text, expected):
    """ConfigCommand.parseConfigsToBeAdded's two regular-expression splits."""
    from broker.tools.common import TerseError
    from broker.tools.configs import parse_add_config
    if expected is None:
        with pytest.raises(TerseError, match='^requirement failed: Invalid entity config: all configs '
                                             'to be added must be in the format "key=val".$'):
            parse_add_config(text)
    else:
        assert parse_add_config(text) == expected


def test_add_config_keys_are_checked(tools_broker, tool):
    r = tool("configs", "--bootstrap-server", tools_broker.bootstrap, "--alter", "--topic", "any",
             "--add-config", "a b=1")
    assert (r.code, r.err) == (1, "Invalid character found for config key: a b\n")


def test_entity_default_of_topics_is_not_every_topic(tools_broker, tool):
    """Kafka describes the topic named "" (and fails): it listed every topic's configs."""
    r = tool("configs", "--bootstrap-server", tools_broker.bootstrap, "--describe",
             "--entity-type", "topics", "--entity-default")
    assert r.code == 1 and r.lines == ["Default configs for topics in the cluster are:"], r
    assert r.err == "Error: Topic name is invalid: the empty string is not allowed\n"
