"""The committed generated code is exactly what the generator produces from protocol/spec."""
import difflib
import pathlib

import pytest

from protocol.codegen import generate, write
from protocol.codegen.versions import Versions, condition

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPECS = ROOT / "protocol" / "spec"


@pytest.fixture(scope="module")
def generated():
    return generate(SPECS)


def test_regenerate_and_diff(tmp_path, generated):
    files = generated
    write(files, tmp_path)
    differences = []
    for rel in sorted(files):
        committed = ROOT / "protocol" / rel
        fresh = (tmp_path / rel).read_text()
        old = committed.read_text() if committed.exists() else ""
        if old != fresh:
            differences.extend(difflib.unified_diff(old.splitlines(), fresh.splitlines(),
                                                    f"committed/{rel}", f"fresh/{rel}", lineterm=""))
    assert not differences, "\n".join(differences[:80])
    for sub in ("messages", "internal"):
        generated = {p.name for p in (ROOT / "protocol" / sub).glob("*.py")}
        assert generated == {pathlib.Path(r).name for r in files if r.startswith(sub + "/")}


def test_generation_is_deterministic(generated):
    assert generate(SPECS) == generated


def test_generated_code_has_no_about_text():
    import json
    import re
    from protocol.codegen.spec import strip_comments
    abouts = set()
    for path in (SPECS / "messages").glob("*.json"):
        abouts.update(re.findall(r'"about":\s*"([^"]{25,})"', strip_comments(path.read_text())))
    text = "\n".join(p.read_text() for p in (ROOT / "protocol").rglob("*.py"))
    assert not [a for a in abouts if a in text]
    json.dumps(sorted(abouts))


def test_version_conditions():
    within = Versions(0, 12)
    assert condition(Versions.parse("0+"), within) is None
    assert condition(Versions.parse("4+"), within) == "version >= 4"
    assert condition(Versions.parse("0-3"), within) == "version <= 3"
    assert condition(Versions.parse("2-5"), within) == "2 <= version <= 5"
    assert condition(Versions.parse("7"), within) == "version == 7"
    assert condition(Versions.parse("none"), within) == "False"
    assert condition(Versions.parse("13+"), within) == "False"
    assert str(Versions.parse("3+")) == "3+"
