"""Crash safety with real processes: SIGKILL an appending child 20 times on the same directory.

After every kill the directory is reopened the way a broker would (LogManager start-up with no
clean-shutdown marker): every batch must be CRC-valid, offsets contiguous, both indexes in
agreement with the log, and every append the child acknowledged must be there with its values.
"""
import os
import random
import signal
import subprocess
import sys
import time

from storage.log_manager import LogManager

from tests.storage.crash_child import CONFIG
from tests.storage.log_checks import check_log

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILLS = 20


def run_child_until_killed(log_dir, generation, rng):
    child = subprocess.Popen([sys.executable, "-m", "tests.storage.crash_child", log_dir,
                              str(generation)], cwd=ROOT, stdout=subprocess.PIPE)
    try:
        # Wait for the first acknowledgement so the kill lands mid-work, then a random delay.
        first = child.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        rest = child.stdout.read()
    finally:
        child.kill()
        child.wait(timeout=10)
    lines = (first + rest).decode().split("\n")
    complete = lines[:-1]                       # the last piece may be a torn line
    acked = []
    for line in complete:
        first_offset, last_offset, tag = line.split()
        acked.append((int(first_offset), int(last_offset), tag))
    return acked, child.returncode


def test_sigkill_twenty_times(tmp_path):
    rng = random.Random(20240601)
    log_dir = str(tmp_path / "logs")
    expected = {}                               # offset -> value prefix
    for generation in range(1, KILLS + 1):
        acked, code = run_child_until_killed(log_dir, generation, rng)
        assert code == -signal.SIGKILL
        assert acked, "the child acknowledged nothing before the kill"
        for first_offset, last_offset, tag in acked:
            for i, offset in enumerate(range(first_offset, last_offset + 1)):
                expected[offset] = f"{tag}-{i}".encode()
        manager = LogManager([log_dir], CONFIG)
        manager.startup(cluster_id="crash-test", broker_id=0)
        assert manager.had_clean_shutdown[os.path.abspath(log_dir)] is False
        log_ = manager.get_log("crash", 0)
        views = check_log(log_)
        found = {r.offset: r.value for v in views for r in v.records()}
        assert log_.log_start_offset == 0
        for offset, prefix in expected.items():
            assert found.get(offset, b"")[:len(prefix)] == prefix and \
                found[offset] == prefix * 9, f"acknowledged offset {offset} lost"
        # Offsets the child wrote but never acknowledged may survive; the next generation
        # appends after them.  Forget expectations above the recovered end (none should be).
        assert max(expected) < log_.log_end_offset
        for log_obj in manager.logs():
            log_obj.close()
        manager.release_locks()                 # closed without a shutdown: still unclean
    assert len(expected) > 100
    assert len(log_.segments) > 5                # the kills landed across many rolls
