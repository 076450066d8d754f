"""broker/quotas.py: entity validation, Kafka's quota precedence and the sampled-rate throttle math
(pure: the clock is an argument, no sleeps)."""
import pytest

from protocol.errors import ErrorCode, KafkaError

from broker.quotas import (CLIENT_ID, CONSUMER_BYTE_RATE, IP, PRODUCER_BYTE_RATE, USER,
                           ClientQuotaManager, QuotaManagers, Rate, apply_ops, check_entity,
                           check_value, entity_key, principal_name)


def ent(**parts):
    return entity_key((k.replace("_", "-"), v) for k, v in parts.items())


ALICE = ent(user="alice")
ALICE_C1 = ent(user="alice", client_id="c1")
ALICE_ANYC = ent(user="alice", client_id=None)
DEFU = ent(user=None)
DEFU_C1 = ent(user=None, client_id="c1")
DEFU_DEFC = ent(user=None, client_id=None)
C1 = ent(client_id="c1")
DEFC = ent(client_id=None)


def refused(fn, *args) -> str:
    with pytest.raises(KafkaError) as info:
        fn(*args)
    assert info.value.error_code == ErrorCode.INVALID_REQUEST
    return info.value.message


# -- validation ------------------------------------------------------------------------------------

def test_entities_are_canonical_and_validated():
    assert check_entity([(USER, "alice"), (CLIENT_ID, "c1")]) == ((CLIENT_ID, "c1"), (USER, "alice"))
    assert check_entity([(CLIENT_ID, None)]) == ((CLIENT_ID, None),)
    assert check_entity([(IP, "10.0.0.1")]) == ((IP, "10.0.0.1"),)
    assert refused(check_entity, []) == "Invalid empty client quota entity"
    assert "duplicate entity entry user" in refused(check_entity, [(USER, "a"), (USER, "b")])
    assert refused(check_entity, [("group", "g")]) == "Unhandled client quota entity type: group"
    assert refused(check_entity, [(USER, "")]) == "Empty user not supported"
    assert "IP entity should not be combined" in refused(check_entity, [(IP, None), (USER, "a")])


def test_values_are_checked_for_the_entity_kind():
    check_value(ALICE, PRODUCER_BYTE_RATE, 1024.0)
    check_value(ALICE, "request_percentage", 12.5)            # a double: fractions allowed
    check_value(((IP, None),), "connection_creation_rate", 10.0)
    assert refused(check_value, ALICE, "connection_creation_rate", 1.0) == \
        "Invalid configuration key connection_creation_rate"
    assert refused(check_value, ((IP, "1.2.3.4"),), PRODUCER_BYTE_RATE, 1.0) == \
        "Invalid configuration key producer_byte_rate"
    assert refused(check_value, ALICE, "bogus", 1.0) == "Invalid configuration key bogus"
    assert refused(check_value, ALICE, PRODUCER_BYTE_RATE, 0.0) == \
        "Quota producer_byte_rate must be greater than 0"
    assert refused(check_value, ALICE, CONSUMER_BYTE_RATE, -5.0) == \
        "Quota consumer_byte_rate must be greater than 0"
    assert refused(check_value, ALICE, PRODUCER_BYTE_RATE, 10.5) == \
        "producer_byte_rate cannot be a fractional value."
    assert "too large" in refused(check_value, ((IP, None),), "connection_creation_rate", 2.0**40)


def test_apply_ops_sets_and_removes():
    assert apply_ops({"a": 1.0, "b": 2.0}, [("a", 5), ("b", None), ("c", None)]) == {"a": 5.0}


def test_principal_name():
    assert principal_name("User:ANONYMOUS") == "ANONYMOUS"
    assert principal_name("User:alice") == "alice"


# -- precedence ------------------------------------------------------------------------------------

def manager(quotas: dict) -> ClientQuotaManager:
    m = ClientQuotaManager(PRODUCER_BYTE_RATE)
    m.update({e: {PRODUCER_BYTE_RATE: v} for e, v in quotas.items()})
    return m


def test_precedence_follows_kafka_order():
    levels = [(ALICE_C1, ("alice", "c1")), (ALICE_ANYC, ("alice", "c1")), (ALICE, ("alice", "")),
              (DEFU_C1, ("alice", "c1")), (DEFU_DEFC, ("alice", "c1")), (DEFU, ("alice", "")),
              (C1, ("", "c1")), (DEFC, ("", "c1"))]
    # with every level set, removing the winner each time exposes the next one
    quotas = {entity: float(i + 1) for i, (entity, _) in enumerate(levels)}
    for i, (entity, tags) in enumerate(levels):
        assert manager(quotas).resolve("alice", "c1") == (tags, float(i + 1)), entity
        del quotas[entity]
    assert manager(quotas).resolve("alice", "c1") == (None, None)


def test_an_empty_client_id_counts_only_as_a_user():
    # Kafka's quotaLimit skips the client-id levels when the client id is empty: a default
    # client-id quota does not throttle a client that sends none.
    assert manager({DEFC: 1000.0}).resolve("ANONYMOUS", "") == (None, None)
    assert manager({DEFU_DEFC: 1000.0}).resolve("ANONYMOUS", "") == (None, None)
    assert manager({ALICE_ANYC: 1000.0, DEFU: 50.0}).resolve("alice", "") == (("alice", ""), 50.0)
    assert manager({ALICE_ANYC: 1000.0, DEFU: 50.0}).resolve("alice", "c1") == (
        ("alice", "c1"), 1000.0)


def test_other_keys_and_other_names_do_not_apply():
    m = ClientQuotaManager(PRODUCER_BYTE_RATE)
    m.update({ALICE: {CONSUMER_BYTE_RATE: 10.0}, ent(user="bob"): {PRODUCER_BYTE_RATE: 5.0},
              ent(client_id="c2"): {PRODUCER_BYTE_RATE: 7.0}})
    assert m.resolve("alice", "c1") == (None, None)
    assert m.resolve("bob", "c1") == (("bob", ""), 5.0)
    assert m.resolve("ANONYMOUS", "c2") == (("", "c2"), 7.0)
    assert m.record("alice", "c1", 10**9, 0) == 0 and not m.sensors     # no quota: nothing kept


def test_a_user_quota_is_shared_by_all_its_clients():
    m = manager({ALICE: 1000.0})
    assert m.record("alice", "c1", 6000, 0) == 0       # 6000 B over the 10 s minimum window
    assert m.record("alice", "c2", 6000, 0) > 0        # the same sensor: 12000 B / 10 s > 1000
    assert list(m.sensors) == [("alice", "")]


# -- the rate and the throttle ---------------------------------------------------------------------

def test_throttle_time_is_kafkas_formula():
    m = manager({C1: 1024.0})                           # 11 windows of 1 s
    # first record: the window counts as 10 full windows (10 s): rate 20480 / 10 = 2048 B/s
    assert m.record("ANONYMOUS", "c1", 20480, 1000) == round((2048 - 1024) / 1024 * 10000)
    m2 = manager({C1: 1024.0})
    assert m2.record("ANONYMOUS", "c1", 10240, 1000) == 0      # exactly at the bound: allowed
    assert m2.record("ANONYMOUS", "c1", 1, 1000) == 1          # 0.1 B/s over: 0.98 ms, rounded


def test_rate_decays_as_samples_expire():
    m = manager({C1: 1000.0})
    assert m.record("u", "c1", 30000, 0) > 0
    # 11 windows later every sample is obsolete: back under the quota
    assert m.record("u", "c1", 100, 11_000) == 0


def test_rate_spans_the_elapsed_time_once_past_the_minimum():
    rate = Rate()
    for second in range(20):
        rate.record(1000, second * 1000, 11, 1000)
    # 11 samples of 1000 B, the oldest started 10 s ago: 11000 B / 10 s
    assert rate.window_size_ms(19_000, 11, 1000) == 10_000
    assert rate.measure(19_000, 11, 1000) == pytest.approx(1100.0)
    assert rate.measure(19_500, 11, 1000) == pytest.approx(11000 / 10.5)


def test_window_configs_change_the_math():
    m = ClientQuotaManager(PRODUCER_BYTE_RATE, window_num=3, window_size_s=2)
    m.update({C1: {PRODUCER_BYTE_RATE: 100.0}})
    # minimum window (3 - 1) * 2 s = 4 s: 800 B -> 200 B/s, throttle (200-100)/100 * 4000
    assert m.record("u", "c1", 800, 0) == 4000
    assert m.max_value_in_window("u", "c1") == 100.0 * 2 * 2


def test_unrecord_takes_bytes_back():
    m = manager({C1: 1000.0})
    assert m.record("u", "c1", 20000, 0) > 0
    m.unrecord("u", "c1", 20000, 0)
    assert m.record("u", "c1", 5000, 10) == 0


def test_idle_sensors_expire_after_an_hour():
    m = manager({C1: 1000.0, ent(client_id="c2"): 1000.0})
    m.record("u", "c1", 1, 0)
    m.record("u", "c2", 1, 3_000_000)
    m.record("u", "c2", 1, 3_700_000)
    assert list(m.sensors) == [("", "c2")]


class Ctx:
    def __init__(self, client_id, size=0, principal="User:ANONYMOUS"):
        self.client_id, self.request_size, self.principal = client_id, size, principal


def test_managers_for_the_handlers():
    q = QuotaManagers()
    assert q.produce_throttle(Ctx("c1", 10**9), 0) == 0          # no quotas at all
    q.update({C1: {PRODUCER_BYTE_RATE: 1000.0}, ent(user="ANONYMOUS"): {CONSUMER_BYTE_RATE: 500.0}})
    assert q.produce_throttle(Ctx("c1", 50_000), 0) > 0
    assert q.produce_throttle(Ctx("c2", 50_000), 0) == 0          # no quota for c2
    assert q.fetch_max_bytes(Ctx("any"), 10**8) == 500 * 10        # the anonymous user's quota
    assert q.fetch_max_bytes(Ctx("any", principal="User:bob"), 123) == 123
    assert q.fetch_throttle(Ctx("any"), 20_000, 0) > 0
    assert q.fetch_throttle(Ctx("any"), 4_000, 0) == 0            # the throttled bytes were taken back


def test_throttle_fits_the_int32_field():
    m = manager({C1: 1.0})
    assert m.record("u", "c1", 1e12, 0) == 2**31 - 1


def test_a_zero_or_negative_quota_does_not_fail_the_request():
    """A hand-edited znode may hold producer_byte_rate=0 or -5 (the tools refuse both): Kafka's
    formula divides by the bound, giving Infinity or a negative time, which its toInt makes no
    throttle. It raised here (0), after the Produce had been appended: every request failed
    while its records were stored; a negative bound gave a negative throttle_time_ms."""
    for bound in (0.0, -5.0):
        m = manager({C1: bound})
        assert m.record("u", "c1", 100, 0) == 0


def test_a_steady_overload_is_measured_over_eleven_windows_as_kafkas_sampled_stat():
    # Kafka's SampledStat keeps quota.window.num + 1 samples (one overlapping the window's
    # start) and purges by each sample's last record: 500 B every 100 ms against 1000 B/s is
    # measured at ~5045 B/s over 11 s, a 44.5 s throttle (it was 10 s and 40.5 s here).
    rate = Rate()
    for t in range(0, 25_001, 100):
        rate.record(500, t, 11, 1000)
    measured, window = rate.measure_with_window(25_000, 11, 1000)
    assert window == 11_000
    assert round((measured - 1000) / 1000 * window) == 44_500
