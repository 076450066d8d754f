"""bench/null_broker.py, the transactions benchmark's ceiling: its figure means something only
if a real transactional client (confluent-kafka) runs its whole flow against it, from
init_transactions to commit, and every message is acknowledged."""
from bench import txn_bench


def test_confluent_kafka_commits_transactions_against_the_null_broker():
    mbs, client_cores, server_cores = txn_bench.client_ceiling(600, 100)
    # (the CPU figures of so short a run may read 0: os.times counts in 10 ms steps)
    assert mbs > 0 and client_cores >= 0 and server_cores >= 0
