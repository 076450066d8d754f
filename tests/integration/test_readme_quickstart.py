"""The README's Quick start, run as written against a broker subprocess: every command succeeds,
and what it prints matches the sample output the README shows under it.

The shell blocks of the "Quick start" section are read from README.md, so a change of a tool's
output or of the README shows up here. In a block, comment lines right after a command are its
sample output ("# " stripped); a comment line that is only "..." stands for any further lines, a
line ending in "..." for any rest of that line, and topic ids (random) match any id. Other
comment lines (after a blank line) describe the next command. `localhost:9092` becomes the test
broker's address.
"""
import os
import re
import subprocess

import pytest

from tests.integration.conftest import ROOT

pytestmark = pytest.mark.integration

ELLIPSIS = "..."
_TOPIC_ID = re.compile(r"TopicId: \S+")


def quick_start_commands():
    """[(command, [expected output lines])] from the README's Quick start section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if not line.strip() or line.startswith("#") or line.startswith("make run"):
                i += 1
                continue
            command = line
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + lines[i].strip()
            i += 1
            expected = []
            while i < len(lines) and lines[i].startswith("#"):
                expected.append(lines[i][2:])
                i += 1
            commands.append((command, expected))
    return commands


def matches(expected: list, actual: list) -> bool:
    def same(want, got):
        want, got = _TOPIC_ID.sub("TopicId: <id>", want), _TOPIC_ID.sub("TopicId: <id>", got)
        if want.endswith(ELLIPSIS):
            return got.startswith(want[:-len(ELLIPSIS)])
        return want == got
    for n, want in enumerate(expected):
        if want == ELLIPSIS:
            return True
        if n >= len(actual) or not same(want, actual[n]):
            return False
    return len(actual) == len(expected)


def test_quick_start_runs_as_the_readme_shows(broker_process):
    commands = quick_start_commands()
    assert len(commands) >= 7 and sum(1 for _, e in commands if e) >= 3, commands
    broker = broker_process()
    env = dict(os.environ, PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}")
    for command, expected in commands:
        command = command.replace("localhost:9092", broker.bootstrap) \
            .replace("127.0.0.1:9092", broker.bootstrap)
        result = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, (command, result.stdout, result.stderr)
        if expected:
            actual = result.stdout.splitlines()
            assert matches(expected, actual), (command, "\n".join(expected), result.stdout)
