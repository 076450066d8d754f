"""`make run` installs only the broker's dependencies (pyproject's `dependencies`), so the
broker, the embedded broker and every bin/ tool must import and start without the `spark` and
`test` extras; the Spark jobs must say which extra they need when it is missing."""
import pathlib
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXTRAS_ONLY = ("pyspark", "pyarrow", "pytest", "hypothesis", "confluent_kafka", "kafka",
               "aiokafka", "matplotlib")

# Runs in a child interpreter: any import of a package from an extra fails, as in a .venv made
# by `pip install -e .`.
BLOCKER = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRAS_ONLY!r}:
            raise ImportError(f"No module named {{name!r}} (blocked: not a broker dependency)")
sys.meta_path.insert(0, Block())
"""


def run_without_extras(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER + code], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_extras_split():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("=")[0].strip() for d in project["dependencies"]}
    assert not names & {"pyspark", "pyarrow", "pytest", "confluent-kafka"}
    assert {"pyspark", "pyarrow"} <= {d.split(">")[0] for d in
                                      project["optional-dependencies"]["spark"]}


def test_broker_and_tools_import_without_the_extras():
    modules = sorted(f"broker.tools.{p.stem}" for p in (ROOT / "broker" / "tools").glob("*.py")
                     if p.stem != "__init__")
    modules += ["broker.__main__", "broker.server", "broker.embedded", "coordinator.runtime",
                "broker.dispatch", "storage.log_manager"]
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    result = run_without_extras(code)
    assert result.returncode == 0, result.stderr


def test_embedded_broker_runs_without_the_extras():
    result = run_without_extras("""
from broker.embedded import EmbeddedBroker
with EmbeddedBroker(topics={"t": 1}) as kafka:
    kafka.produce("t", [b"a", b"b"])
    assert [r.value for r in kafka.read_all("t")] == [b"a", b"b"]
print("ok")
""")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_spark_jobs_name_the_extra_they_need():
    result = run_without_extras("""
import sys
from spark_jobs import topic_stats
sys.exit(topic_stats.main(["--log-dirs", "/nonexistent"]))
""")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "spark_jobs: the Spark jobs need PySpark and pyarrow, the project's 'spark' extra: "
        "pip install -e '.[spark]' (make install installs it)"]
