"""The built wheel, installed into a fresh venv, works on its own.

- it carries the Alembic migrations (``benchledger/_migrations``) and the
  ``pytest11`` entry point;
- ``benchledger db upgrade`` from the installed wheel migrates an empty
  database to this checkout's head, on every configured backend;
- with only pytest installed, the plugin loads by itself (no conftest, no
  ``-p``) and its fixtures work; factory-boy is optional;
- with ``benchledger[testing]``, the docs' example module passes with plain
  ``pytest`` in an empty directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchledger import Database
from benchledger.db import head_revision
from benchledger.testing.plugin import ledger_server_url

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "test_ledger_example.py"
EXAMPLE_TESTS = 6

PLUGIN_ONLY = """
from benchledger import Database
from benchledger.services.campaigns import CampaignService
from benchledger.testing import LedgerClock


def test_fixtures_come_from_the_plugin(
    ledger_db: Database, ledger_clock: LedgerClock, ledger_session, campaign_service
) -> None:
    assert isinstance(campaign_service, CampaignService)
    assert campaign_service.clock is ledger_clock
    assert ledger_db.current_revision() is not None
    assert ledger_session.bind is not None


def test_factory_boy_is_not_needed() -> None:
    import importlib.util

    assert importlib.util.find_spec("factory") is None
"""


def _run(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(args)} exited {result.returncode}\n"
            f"--- stdout\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-6000:]}"
        )
    return result


class Installed:
    """A fresh venv with the wheel built from this checkout."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.timings: dict[str, float] = {}
        # Nothing of this checkout or its venv may leak into the fresh one.
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("BENCHLEDGER_", "PYTEST_", "PYTHON", "VIRTUAL_ENV"))
        }
        self.venv = workdir / "venv"
        self.bin = self.venv / "bin"
        self.env["PATH"] = f"{self.bin}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        self.wheel = self._build()
        self._step("venv", [sys.executable, "-m", "venv", str(self.venv)], workdir)
        # Plugin first, without factory-boy: the entry point must load without it.
        self.pip("install-plugin", str(self.wheel), "pytest")

    def _step(self, name: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        started = time.perf_counter()
        result = _run(args, cwd, self.env)
        self.timings[name] = time.perf_counter() - started
        return result

    def _build(self) -> Path:
        dist = self.workdir / "dist"
        self._step(
            "build",
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
            self.workdir,
        )
        (wheel,) = dist.glob("benchledger-*.whl")
        return wheel

    def pip(self, name: str, *requirements: str) -> None:
        self._step(
            name,
            [str(self.bin / "python"), "-m", "pip", "install", "-q", *requirements],
            self.workdir,
        )

    def run(self, name: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        return self._step(name, args, cwd)


# Session-wide: pytest runs this module's tests in backend groups, and a module
# fixture would build and install the wheel again for each group.
@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    started = time.perf_counter()
    kit = Installed(tmp_path_factory.mktemp("wheel"))
    yield kit
    kit.timings["total"] = time.perf_counter() - started
    print("\nwheel test timings (s): " + ", ".join(f"{k}={v:.1f}" for k, v in kit.timings.items()))


def _empty_dir(installed: Installed, name: str) -> Path:
    path = installed.workdir / name
    path.mkdir()
    return path


def test_the_wheel_ships_migrations_and_the_plugin_entry_point(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        entry_text = wheel.read(entry_points).decode()
        metadata_text = wheel.read(metadata).decode()
    revisions = sorted(path.name for path in (ROOT / "migrations" / "versions").glob("*.py"))
    assert revisions
    for name in ("env.py", "script.py.mako", *(f"versions/{r}" for r in revisions)):
        assert f"benchledger/_migrations/{name}" in names
    assert "benchledger/testing/plugin.py" in names
    assert "benchledger/py.typed" in names
    assert re.search(r"\[pytest11\]\s*\nbenchledger = benchledger\.testing\.plugin", entry_text)
    assert "Provides-Extra: testing" in metadata_text


def test_db_upgrade_from_the_installed_wheel(
    installed: Installed, ledger_empty_db: Database, tmp_path: Path
) -> None:
    cli = str(installed.bin / "benchledger")
    url = ledger_empty_db.url
    upgraded = installed.run("db-upgrade", [cli, "--url", url, "db", "upgrade"], tmp_path)
    assert head_revision() in upgraded.stdout
    installed.run("db-check", [cli, "--url", url, "db", "check"], tmp_path)
    # The installed migrations are this checkout's: same head, same schema.
    assert ledger_empty_db.current_revision() == head_revision()
    ledger_empty_db.require_current_schema()


RESULTS_SCRIPT = """
import sys
import benchledger as bl
from benchledger.examples import example_policy, example_suite
from benchledger.examples.evaluator import evaluate

db = bl.Database(sys.argv[1])
db.upgrade()
service = bl.CampaignService(db)
suite = example_suite(4)
ids = []
for model in ("example-mt", "example-mt-lite"):
    cid = service.create(example_policy(suite, candidate_model_id=model), suite, max_attempts=1)
    bl.Worker(service, cid, "w", evaluate, retry_base_seconds=0).run()
    ids.append(cid)
print(" ".join(ids))
"""


def test_results_and_compare_work_from_the_base_install(
    installed: Installed, tmp_path: Path
) -> None:
    """The results reads need nothing beyond the base install; Parquet says what it needs."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    script = tmp_path / "work.py"
    script.write_text(RESULTS_SCRIPT)
    python, cli = str(installed.bin / "python"), str(installed.bin / "benchledger")
    full, lite = installed.run("work", [python, str(script), url], tmp_path).stdout.split()
    lines = installed.run(
        "results", [cli, "--url", url, "campaign", "results", lite, "--format", "jsonl"], tmp_path
    ).stdout.splitlines()
    assert len(lines) == 16 and '"status":"failed"' in "".join(lines)
    compared = installed.run(
        "compare", [cli, "--url", url, "campaign", "compare", full, lite, "--json"], tmp_path
    )
    assert '"paired":' in compared.stdout
    parquet = subprocess.run(
        [cli, "--url", url, "campaign", "results", lite, "--format", "parquet", "-o", "x.pq"],
        cwd=tmp_path,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert parquet.returncode == 1
    assert parquet.stderr.startswith("error: ledger.analysis.extra_missing: "), parquet.stderr
    watched = installed.run(
        "watch",
        [cli, "--url", url, "--log-format", "json", "campaign", "watch", lite, "--once", "--json"],
        tmp_path,
    )
    assert json.loads(watched.stdout)["ending"] == "blocked"


def test_the_readme_lists_the_extras_the_wheel_provides(installed: Installed) -> None:
    """README's install table names every extra of the built wheel, and no other."""
    with zipfile.ZipFile(installed.wheel) as wheel:
        (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        text = wheel.read(metadata).decode()
    provided = set(re.findall(r"^Provides-Extra: (\S+)$", text, re.MULTILINE))
    install = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Install\n", 1)[1]
    listed = re.findall(r"^\| `([a-z]+)` \|", install.split("\n## ", 1)[0], re.MULTILINE)
    assert sorted(listed) == sorted(provided)


def test_the_plugin_loads_by_itself_without_factory_boy(installed: Installed) -> None:
    project = _empty_dir(installed, "plugin-only")
    (project / "test_plugin_only.py").write_text(PLUGIN_ONLY)
    result = installed.run("pytest-plugin-only", [str(installed.bin / "pytest")], project)
    assert re.search(r"^plugins: .*benchledger", result.stdout, re.MULTILINE), result.stdout
    assert re.search(r"\b2 passed\b", result.stdout), result.stdout


def test_the_docs_example_passes_with_plain_pytest(
    installed: Installed, request: pytest.FixtureRequest
) -> None:
    installed.pip("install-testing-extra", f"{installed.wheel}[testing]")
    project = _empty_dir(installed, "example")
    shutil.copy(EXAMPLE, project / EXAMPLE.name)
    args = [str(installed.bin / "pytest")]
    expected = EXAMPLE_TESTS
    server = ledger_server_url(request.config)
    if server:  # run it on PostgreSQL too when this suite has a server
        args += ["--ledger-url", server, "--ledger-backends", "sqlite,postgresql"]
        expected *= 2
    result = installed.run("pytest-example", args, project)
    assert re.search(r"^plugins: .*benchledger", result.stdout, re.MULTILINE), result.stdout
    assert re.search(rf"\b{expected} passed\b", result.stdout), result.stdout
    assert "skipped" not in result.stdout
