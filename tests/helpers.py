"""What the tests share: a minimal valid catalog to break in one place per test, the engine over a
catalog compiled in memory, `gpustack` run as a process or in this one, and the Neo4j servers the
tests start themselves. Fixtures live in conftest.py; test modules import from here, never from
each other."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpustack_compiler.base.findings import Findings
from gpustack_compiler.build import pipeline
from gpustack_compiler.manifest.source import ManifestSource
from gpustack_sim import api
from gpustack_sim.engine.observation import load_observations

REPO = Path(__file__).resolve().parent.parent
CATALOG = REPO / "catalog"
FIXTURE = "dense_training_cost_fixture"  # the synthetic preset whose values the tests know by heart
SYSTEM_MODELINE = "# yaml-language-server: $schema=../../schemas/system.schema.json\n"

MINI_SYSTEMS = """# yaml-language-server: $schema=../schemas/systems.schema.json
headline_targets: [training.t_step]
systems:
  - {name: training, prefix: training, description: test}
  - {name: economics, prefix: econ, description: test}
"""

MINI_TRAINING = SYSTEM_MODELINE + """variables:
  - name: training.t_step
    units: s
    description: step time
    assumptions: [positive]
    references: [narayanan2021_megatron]
  - name: training.t_compute
    units: s
    description: compute time
    assumptions: [positive]
    references: [narayanan2021_megatron]
    root: {category: needs_calibration, family: timing}
  - name: training.t_comm
    units: s
    description: exposed communication
    assumptions: [nonnegative]
    references: [narayanan2021_megatron]
    root: {category: needs_calibration, family: timing}
relations:
  - name: training.t_step.sum
    kind: identity
    defines: training.t_step
    expression: training.t_compute + training.t_comm
    description: serial sum
    references: [narayanan2021_megatron]
"""


def data_required() -> bool:
    """In CI (CI=true, or GPUSTACK_REQUIRE_DATA=1 as .ci/run sets) missing data fails the tests that
    need it: a skip there would pass a run that checked nothing."""
    return os.environ.get("GPUSTACK_REQUIRE_DATA") == "1" or os.environ.get("CI", "").lower() == "true"


def calibration_data() -> Path:
    """The calibration data folder, beside the clone as shared/data/calibration (or
    $GPUSTACK_CALIBRATION_DATA, as for `gpustack calibrate`); skips, or fails when required, without it."""
    folder = Path(os.environ.get("GPUSTACK_CALIBRATION_DATA") or REPO.parent / "shared" / "data" / "calibration")
    if not (folder / "training_iterations.csv").is_file():
        why = f"calibration data not found at {folder} (it sits beside the clone as shared/data/calibration)"
        if data_required():
            pytest.fail(f"{why}; CI requires it (CI=true or GPUSTACK_REQUIRE_DATA=1)", pytrace=False)
        pytest.skip(why)
    return folder


def mini_catalog(tmp_path: Path) -> Path:
    root = tmp_path / "catalog"
    root.mkdir()
    for name in ("units.yaml", "constants.yaml", "references.yaml"):
        shutil.copy(CATALOG / name, root / name)
    (root / "systems.yaml").write_text(MINI_SYSTEMS)
    (root / "training").mkdir()
    (root / "training" / "step.yaml").write_text(MINI_TRAINING)
    (root / "economics").mkdir()
    (root / "presets").mkdir()
    return root


def check(root: Path) -> Findings:
    return pipeline.run(root, None, write_manifest=False, use_cache=False).findings


def write_system(root: Path, system: str, body: str, name: str = "extra.yaml") -> Path:
    path = root / system / name
    path.write_text(SYSTEM_MODELINE + body)
    return path


def as_mapping(items) -> dict[str, str]:
    """`NAME=VALUE` items, as tests write them, for the engine's mappings."""
    return dict(item.split("=", 1) for item in items)


class Engine(api.Engine):
    """The library engine over a catalog compiled in memory (or over a compiled manifest), with shortcuts
    for tests."""

    def __init__(self, root: Path | None = None, manifest: dict | None = None):
        if manifest is None:
            result = pipeline.run(root, None, write_manifest=False, use_cache=False)
            assert result.manifest is not None, result.findings.render("text")
            manifest = result.manifest
        self.manifest = manifest
        super().__init__(ManifestSource(self.manifest))

    def resolve(self, target, presets=(), assign=(), variants=(), **kw):
        scenario = self.scenarios.build(list(presets), as_mapping(assign), as_mapping(variants))
        return self.resolver.resolve(target, scenario, **kw)

    def value(self, target: str, presets=(), assign=(), variants=(), base_units: bool = False) -> float:
        """A value that must resolve completely; in declared units, or coherent base units if asked."""
        res = self.resolve(target, presets, assign, variants)
        assert res.missing == {}, res.missing
        return res.value * (self.manifest["variables"][target]["scale"] if base_units else 1.0)


def observed_run_value(engine: api.Engine, path: Path, observation: str):
    """A resolver of any variable in the scenario of one observation's run, as `gpustack validate` builds it
    (its presets, then the end-to-end calibration)."""
    run = next(i.obs.run for i in load_observations([path]) if i.obs.id == observation)
    scenario = engine.run_scenario(run.with_extras(presets=["calibration"]))
    return lambda name: engine.resolve(name, scenario).value


# ---- gpustack as a user runs it -----------------------------------------------------------------

@contextlib.contextmanager
def env_vars(**values: str) -> Iterator[None]:
    """These environment variables set for the duration, then restored (or removed) as they were."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_cli(*args: str, env: dict | None = None, timeout: float = 120, cwd: Path = REPO):
    """`gpustack ARGS` in a subprocess, as a user runs it (environment: this process's, plus `env`)."""
    import subprocess
    import sys

    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", "from gpustack_sim.cli.main import main; main()", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)


class CliResult:
    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_cli_here(*args: str, env: dict | None = None) -> CliResult:
    """`gpustack ARGS` in this process, through the same `main()` (exit codes, one-line errors):
    a subprocess costs a second of imports, and the Neo4j tests run dozens of commands."""
    import io
    import sys
    from contextlib import redirect_stderr, redirect_stdout

    from gpustack_sim.cli.main import main

    saved_argv = sys.argv
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        sys.argv = ["gpustack", *args]
        with env_vars(**(env or {})), redirect_stdout(out), redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved_argv
    return CliResult(code, out.getvalue(), err.getvalue())


def gp(build: Path, *args: str) -> CliResult:
    """The command line on the repository's catalog with a build directory of the test's own."""
    return run_cli_here("--catalog", str(CATALOG), "--build-dir", str(build), *args)


# ---- Neo4j --------------------------------------------------------------------------------------

# The Neo4j a test session starts itself has authentication on, with this password (conftest.py).
SESSION_USER, SESSION_PASSWORD = "neo4j", "correct-horse-battery"
# Servers the tests start live a minute or two: the JVM's optimizing compiler (C2) costs them more CPU
# than it saves (a third of the Neo4j tests' CPU on two cores); the quick one (C1) alone starts sooner.
TEST_JVM_OPTS = (os.environ.get("GPUSTACK_NEO4J_JVM_OPTS", "") + " -XX:TieredStopAtLevel=1").strip()


def neo4j_required() -> bool:
    return os.environ.get("GPUSTACK_REQUIRE_NEO4J") == "1"


def unavailable(reason: str):
    if neo4j_required():
        pytest.fail(f"Neo4j is required (GPUSTACK_REQUIRE_NEO4J=1) but {reason}", pytrace=False)
    pytest.skip(f"no Neo4j: {reason}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    """A Neo4j started by the tests with private state, data and port (the launcher build is shared);
    HTTP (the Browser) only when a test asks for it: it costs start-up time."""

    def __init__(self, root: Path, http: bool = False, **start_args):
        from gpustack_compiler.neo4j.server import operations as srv

        self.srv = srv
        build = srv.ensure_built()  # in the user cache: built once, reused by every session
        self.cache = root / "cache"
        self.cache.mkdir(parents=True, exist_ok=True)
        link = self.cache / "neo4j-launcher"
        if not link.exists():
            link.symlink_to(build.parent, target_is_directory=True)
        self.bolt = free_port()
        self.data = root / "data"  # which keeps the server's pid and state files
        with env_vars(GPUSTACK_CACHE_DIR=str(self.cache), GPUSTACK_NEO4J_JVM_OPTS=TEST_JVM_OPTS):
            self.status = srv.start(bolt_port=self.bolt, http_port=free_port() if http else None, data_dir=self.data,
                                    **start_args)
        self.uri = self.status["bolt_uri"]

    def stop(self) -> None:
        with env_vars(GPUSTACK_CACHE_DIR=str(self.cache)):
            self.srv.stop(timeout=20, data_dir=self.data)


def catalog_under_test() -> Path:
    """The real catalog (GPUSTACK_TEST_CATALOG points the Neo4j tests at another one)."""
    return Path(os.environ.get("GPUSTACK_TEST_CATALOG") or REPO / "catalog")


def compile_catalog(catalog: Path, build: Path) -> dict:
    result = pipeline.run(catalog, build, write_manifest=True)
    if result.manifest is None:
        errors = [f.as_text() for f in sorted(result.findings.errors)][:5]
        pytest.fail(f"{catalog} does not compile: " + " | ".join(errors), pytrace=False)
    return result.manifest
