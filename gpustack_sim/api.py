"""The engine as a library: open a compiled catalog (or a Neo4j graph), then resolve, estimate, sweep,
sample, calibrate and validate, each returning a typed result with `to_dict()`.

    from gpustack_sim import Engine
    engine = Engine.open("catalog")
    est = engine.estimate(engine.load_run("runs/llama70b_1024xh100.yaml"))

Errors are `gpustack_compiler.base.errors.GpustackError` subclasses (InputError, CatalogError,
InfrastructureError, ResolveError); nothing here imports the command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.suggest import did_you_mean
from gpustack_compiler.build import pipeline
from gpustack_compiler.manifest.records import VariableRecord, read_manifest
from gpustack_compiler.manifest.source import GraphSource, ManifestSource

from .compiled import REPO_CATALOG, compile_catalog, default_catalog  # noqa: F401  (part of the API)
from .distributed import Backend
from .distributed.chunks import Progress
from .engine.cache import ParsedRelations, cache_file
from .engine.context import EngineContext
from .engine.resolver import Resolution
from .engine.run import RunSpec
from .engine.run_file import load_run
from .engine.scenario import Scenario
from .engine.serve_run import ServeRunSpec

if TYPE_CHECKING:
    from distributed import Client

    from .analyses.calibrate import Calibration
    from .analyses.diff import CatalogDiff
    from .analyses.estimate import Estimate
    from .analyses.sweep import SweepResult
    from .analyses.uncertainty import Distribution, Summary
    from .analyses.validate import Validation
    from .datacenter import JobParameters, SimulationResult
    from .datacenter.policies import Policy
    from .power import CapResponse

OBSERVATIONS = Path("data") / "observations"


def default_observations() -> Path:
    """./data/observations when there is one, else the observations shipped beside the package."""
    return OBSERVATIONS if OBSERVATIONS.is_dir() else REPO_CATALOG.parent / OBSERVATIONS


class Engine:
    """A graph source (the compiled manifest, or Neo4j) with its tables, the catalog's bindings read from them,
    a scenario builder and a resolver."""

    def __init__(self, source: GraphSource, parsed: ParsedRelations | None = None):
        self.parsed = parsed if parsed is not None else ParsedRelations()
        self.context = EngineContext.over(source, self.parsed)
        self.source = source
        self.tables = self.context.tables
        self.units = self.context.units
        self.facts = self.context.facts
        self.scenarios = self.context.scenarios
        self.resolver = self.context.resolver

    # ---- opening ---------------------------------------------------------------------------
    @staticmethod
    def compile(catalog: str | Path | None = None, build_dir: str | Path | None = "build",
                write: bool = False) -> pipeline.Result:
        """Check and compile a catalog (cached next to the manifest by content hash); CatalogError
        carrying every finding when it has errors."""
        return compile_catalog(catalog, build_dir, write)

    @classmethod
    def open(cls, catalog: str | Path | None = None, build_dir: str | Path | None = "build") -> Engine:
        """The engine over a catalog directory, compiled in memory (the embedded default, no server).
        With a build directory, relations parsed by an earlier run are read back from its cache
        (see `keep_parsed`)."""
        result = cls.compile(catalog, build_dir)
        parsed = ParsedRelations(cache_file(Path(build_dir) / "cache", result.catalog_hash) if build_dir else None)
        return cls(ManifestSource(result.manifest), parsed=parsed)

    @classmethod
    def from_manifest(cls, path: str | Path) -> Engine:
        """The engine over a manifest file written by `gpustack compile` (no catalog needed); a manifest
        of another schema version is refused."""
        return cls(ManifestSource(read_manifest(Path(path))))

    def keep_parsed(self) -> None:
        """Store the relations parsed so far in the build cache, for the next run (the command line
        does this when a command ends)."""
        self.parsed.save()

    @classmethod
    def from_neo4j(cls, uri: str | None = None, user: str | None = None, password: str | None = None,
                   database: str | None = None) -> Engine:
        """The engine over a graph loaded into Neo4j (`gpustack compile --neo4j`), tables included: no
        catalog is needed. NEO4J_* variables fill in what is not given."""
        from gpustack_compiler.neo4j.source import Neo4jSource

        return cls(Neo4jSource.from_env(uri, user, password, database))

    def allowing_violations(self, allow: bool = True) -> Engine:
        """This engine, computing with assigned values outside their variables' assumptions or bounds (the
        checks list them as violated) instead of refusing them with ViolationError."""
        self.scenarios.allow_violations = allow
        return self

    # ---- names and scenarios ---------------------------------------------------------------
    def variable(self, name: str) -> VariableRecord:
        """A variable's record; InputError with a suggestion when there is none."""
        var = self.source.variable(name)
        if var is None:
            raise InputError(f"unknown variable `{name}`", did_you_mean(name, self.source.names()))
        return var

    def scenario(self, presets: Sequence[str] = (), assign: Mapping[str, object] | None = None,
                 variants: Mapping[str, str] | None = None, modes: Sequence[str] = ()) -> Scenario:
        """Presets in order (later ones win), then assignments ('0.5 kW' or a number in declared units),
        variant selections and modes."""
        return self.scenarios.build(presets, assign, variants, modes)

    @staticmethod
    def load_run(path: str | Path | None, overrides: Sequence[str] = ()) -> RunSpec | ServeRunSpec:
        """A run file (schemas/run.schema.json, or schemas/serve_run.schema.json when it says `kind: serving`),
        with `field.path=value` overrides."""
        return load_run(Path(path) if path is not None else None, overrides)

    def run_scenario(self, run: RunSpec | ServeRunSpec) -> Scenario:
        """The scenario a run file describes, through the catalog's run-field (or serving-field) bindings."""
        return self.context.run_scenario(run)

    # ---- analyses --------------------------------------------------------------------------
    def resolve(self, target: str, scenario: Scenario | None = None, *, fallback_on_invalid: bool = False,
                solve: bool = False) -> Resolution:
        self.variable(target)
        return self.resolver.resolve(target, scenario or Scenario(), fallback_on_invalid=fallback_on_invalid,
                                     solve=solve)

    def distribution(self, spec: str) -> Distribution:
        """`NAME~normal(mean, sd)`, `NAME~lognormal(median, sigma)`, `NAME~uniform(low, high)` or
        `NAME~exponential(rate)`: the catalog's distributions, parameters by position or by name."""
        from .analyses.uncertainty import parse_spec

        return parse_spec(spec, self.scenarios)

    # Monte Carlo, sweeps, simulation replications and experiment panels run in chunks, each seeded from the
    # run's seed and its index: in this process, or with `client` (a dask.distributed Client) on its cluster,
    # with the same result for any number of workers (docs/scale.md).

    def sample(self, target: str, scenario: Scenario, distributions: Sequence[Distribution],
               samples: int = 10000, seed: int = 0, client: Client | None = None) -> Summary:
        """Monte Carlo over the given roots and the stochastic relations in the cone: percentiles, mean and
        sd of `target`."""
        from .analyses.uncertainty import MonteCarlo

        self.variable(target)
        return MonteCarlo(self.resolver, Backend(client)).run(target, scenario, list(distributions), samples, seed)

    def estimate(self, run: RunSpec | ServeRunSpec, samples: int = 10000, seed: int = 0,
                 sample: Sequence[str] = (), client: Client | None = None) -> Estimate:
        """A training run's time, throughput, utilization, memory, energy and cost, each with a p5/p50/p95
        interval; a serving run goes to `serve_estimate`."""
        from .analyses.estimate import estimate

        if isinstance(run, ServeRunSpec):
            return self.serve_estimate(run, samples, seed, sample, client)
        return estimate(self.resolver, self.scenarios, self.facts, run, samples, seed, list(sample), Backend(client))

    def serve_estimate(self, run: ServeRunSpec, samples: int = 10000, seed: int = 0,
                       sample: Sequence[str] = (), client: Client | None = None) -> Estimate:
        """A serving run's TTFT and TPOT (p50, p99), largest batch, tokens per second per GPU, energy per
        token and cost per million input and output tokens, each with a p5/p50/p95 interval
        (docs/serving.md)."""
        from .analyses.estimate import serve_estimate

        return serve_estimate(self.resolver, self.scenarios, self.facts, run, samples, seed, list(sample),
                              Backend(client))

    def sweep(self, run: RunSpec | ServeRunSpec, grid: Mapping[str, Sequence], objective: str | None = None,
              top: int = 10, client: Client | None = None, progress: Progress | None = None,
              trials: int | None = None, seed: int = 0) -> SweepResult:
        """Every layout on the grid (axis -> values, as text or as a run file writes them), invalid ones
        counted by reason, valid ones ranked by `objective` (axes and objectives: catalog/bindings/; by default
        tokens_per_sec for a training run, cost_per_output_token for a serving run). A training grid streams
        through in chunks (on `client`'s workers if given): memory stays bounded whatever its size;
        `progress(done, total)` hears of chunks done. With `trials`, a training grid is searched (a seeded
        Optuna TPE search, analyses/search.py) instead of enumerated. A serving grid (hundreds of layouts, each a
        full resolve) runs in this process."""
        grid = {k: list(v) for k, v in grid.items()}
        if isinstance(run, ServeRunSpec):
            if client is not None or trials is not None:
                raise InputError("a serving sweep runs in this process over its whole grid: drop "
                                 "--workers/--scheduler (client) and --trials")
            from .analyses.serve_sweep import serve_sweep

            return serve_sweep(self.resolver, self.scenarios, self.facts, run, grid, objective, top)
        from .analyses.sweep import sweep

        return sweep(self.resolver, self.scenarios, self.facts, run, grid, objective or "tokens_per_sec", top,
                     Backend(client), progress, trials, seed)

    def calibrate(self, data: str | Path | Sequence[str | Path] = ()) -> Calibration:
        """Fit the calibration parameters (nothing is written): to calibration observations (files or
        folders; evaluation observations are refused by id), to a calibration data folder holding
        training_iterations.csv, or, given nothing, to every calibration observation in data/observations."""
        from .analyses import calibrate as cal
        from .engine.observation import load_observations

        paths = [Path(data)] if isinstance(data, (str, Path)) else [Path(p) for p in data]
        if len(paths) == 1 and (paths[0] / cal.DATA_FILES[0]).is_file():
            rows, evidence = cal.folder_rows(paths[0], self.facts, set(self.scenarios.presets))
        else:
            items = load_observations(paths) if paths else [
                i for i in load_observations([default_observations()])
                if i.obs.split == "calibration" and i.obs.component is None and i.obs.learning is None]
            rows, evidence = cal.observation_rows(items, self.scenarios, self.facts, set(self.tables.references))
        return cal.calibrate(self.resolver, self.scenarios, self.facts, rows, evidence)

    def calibrate_components(self, data: str | Path | Sequence[str | Path] = ()) -> list[Calibration]:
        """Fit the kernel and memory efficiencies per hardware generation (nothing is written) to component
        benchmarks: the given observation files or folders, or every one in data/observations. One
        calibration per generation (catalog/bindings/calibration_fit.yaml, components.generations)."""
        from .analyses import calibrate as cal
        from .engine.observation import load_observations

        paths = [Path(data)] if isinstance(data, (str, Path)) else [Path(p) for p in data]
        items = load_observations(paths) if paths else [
            i for i in load_observations([default_observations()]) if i.obs.component is not None]
        return cal.component_calibrations(self.resolver, self.scenarios, self.facts, items,
                                          set(self.tables.references))

    def calibrate_learning(self, data: str | Path | Sequence[str | Path] = ()) -> Calibration:
        """Fit the learning roots (catalog/bindings/calibration_fit.yaml, learning) to the local learning
        workload's calibration measurements: the given observation files or folders, or every calibration
        observation with a learning condition in data/observations (nothing is written)."""
        from .analyses import calibrate as cal
        from .engine.observation import load_observations

        paths = [Path(data)] if isinstance(data, (str, Path)) else [Path(p) for p in data]
        items = load_observations(paths) if paths else [
            i for i in load_observations([default_observations()])
            if getattr(i.obs, "learning", None) is not None and i.obs.split == "calibration"]
        return cal.learning_calibration(self.resolver, self.scenarios, self.facts, items, set(self.tables.references))

    def simulate(self, run: RunSpec, *, sites: str | Path | None = None, policy: str | Policy = "daly", seed: int = 0,
                 replications: int = 1, days: float | None = None, interval_s: float | None = None,
                 client: Client | None = None, progress: Progress | None = None,
                 parameters: JobParameters | None = None,
                 layouts: Mapping[str, RunSpec] | None = None) -> SimulationResult:
        """Replay the run in the virtual datacenter (to its token budget, or over `days`): failures,
        checkpoints, recovery and power, with intervals over replications (docs/datacenter.md).
        `parameters` (from `job_parameters(run)`) saves resolving the run again. `progress(done, total)` hears
        of chunks of replications done. `layouts`: other run files
        of the same job in another parallel layout (name -> run), which a policy may switch to. A serving run
        replays its fleet (`simulate_serving`: Poisson arrivals over `days` x 24 hours, one hour without)."""
        from .datacenter import simulate
        from .datacenter.sites import load_sites

        if isinstance(run, ServeRunSpec):
            return self.simulate_serving(run, sites=sites, seed=seed, replications=replications,
                                         hours=24 * days if days is not None else 1.0, client=client, progress=progress)
        placed = None if sites is None else load_sites(Path(sites), self.units, set(self.tables.presets))
        params = parameters if parameters is not None else self.job_parameters(run)[0]
        variants = {name: self.job_parameters(r)[0] for name, r in (layouts or {}).items()}
        return simulate(params, sites=placed, policy=policy, seed=seed, replications=replications, days=days,
                        to_budget=days is None, interval_s=interval_s, backend=Backend(client), progress=progress,
                        layouts=variants)

    @staticmethod
    def diff(catalog: str | Path, base: str = "HEAD", runs: str | Path | None = None) -> CatalogDiff:
        """The change from `base` (a git ref) to the work tree, for the catalog folder `catalog` and the run
        files in `runs` (default: runs/ beside the catalog): entries, cones reached, every run's estimate."""
        from .analyses.diff import catalog_diff

        return catalog_diff(catalog, base, runs, lambda manifest: Engine(ManifestSource(manifest)))

    def simulate_serving(self, run: ServeRunSpec, *, arrivals: str = "poisson", hours: float = 1.0,
                         sites: str | Path | None = None, routing: str = "least_loaded", rate: float | None = None,
                         gpus: int | None = None, seed: int = 0, replications: int = 1,
                         client: Client | None = None, progress: Progress | None = None, **options):
        """Replay a serving run's fleet in the virtual datacenter: requests of a workload family (a name in
        data/workloads/, a family file or a trace CSV), continuous batching per replica, routing, power and
        grid dispatches; SLO attainment, latency, tokens, energy and cost with intervals over replications
        (docs/serving-replay.md). `options` go to `datacenter.serving.simulate_serving`."""
        from .datacenter.serving import load_family, replica_parameters, simulate_serving
        from .datacenter.sites import load_sites

        family = load_family(arrivals)
        placed = None if sites is None else load_sites(Path(sites), self.units, set(self.tables.presets))
        params, _ = replica_parameters(self.context, run)
        w = run.workload
        lengths = {k: {"mean": getattr(w, k).mean, "max": getattr(w, k).max} for k in ("input_tokens", "output_tokens")}
        return simulate_serving(params, family, run_name=run.name, run_lengths=lengths, load_curve=w.load_curve,
                                context=run.model.seq_len, hours=hours, rate=rate, routing=routing, sites=placed,
                                gpus=gpus, seed=seed, replications=replications, backend=Backend(client),
                                progress=progress, **options)

    def job_parameters(self, run: RunSpec) -> tuple[JobParameters, dict[str, Resolution]]:
        """What the virtual datacenter takes from the catalog for `run`, and the resolution of each."""
        from .datacenter.from_engine import job_parameters

        return job_parameters(self.context, run)

    def power_under_cap(self, scenario: Scenario, cap_w: float) -> CapResponse:
        """Clock, board power and throughput of compute-bound and memory-bound phases with the board capped
        at `cap_w` watts, from the catalog's physics (catalog/gpu/power_cap.yaml; docs/power.md)."""
        from .power import power_under_cap

        return power_under_cap(self.resolver, self.scenarios, scenario, cap_w)

    def scenario_report(self, preset: str, targets: Mapping[str, str] | None = None) -> dict:
        """A preset's advertised targets (plus `targets`, label -> variable) resolved from it alone."""
        from .analyses.presets import report

        return report(self.resolver, self.scenarios, preset, targets or {})

    def validate_learning(self, sources: str | Path | Sequence[str | Path] = (), *, samples: int = 200,
                          seed: int = 0) -> Validation:
        """Score the learning calibration (calibration_learning) on held-out local learning conditions: the
        given evaluation observations, or every one with a learning condition in data/observations."""
        from .analyses.validate import validate_learning

        paths = [Path(sources)] if isinstance(sources, (str, Path)) else [Path(p) for p in sources]
        return validate_learning(self.resolver, self.scenarios, self.facts, paths, samples=samples, seed=seed,
                                 default_dir=default_observations(), references=set(self.tables.references))

    def model_form(self, run: RunSpec | ServeRunSpec, samples: int = 2) -> dict:
        """The model-form term of a run (docs/evaluation.md): the errors of every evaluation panel of
        data/observations, in the run's stratum, at 50% and 90%; outside the panels' territory it widens, and
        with too few rows it abstains, saying why."""
        from .analyses.model_form import for_run
        from .analyses.validate import LEVELS

        return for_run(run, self.facts, self.validate(samples=samples).rows, sorted(LEVELS))

    def validate(self, sources: str | Path | Sequence[str | Path] = (), *, presets: Sequence[str] = (),
                 assign: Mapping[str, object] | None = None, samples: int = 2000, seed: int = 0,
                 calibration: str | None = "calibration", sealed: bool = False) -> Validation:
        """Predict held-out measurements with the calibrated model and score them per panel: evaluation
        observations (files or folders; calibration ones are refused by id) and CSV files in the calibration
        columns; given nothing, every evaluation observation in data/observations. `presets` and `assign`
        apply to every row after its own; rows that do not resolve are reported with their reason. Sealed
        observations (data/sealed) are refused unless `sealed`, which scores the sealed set alone, as sealed."""
        from .analyses.validate import validate

        paths = [Path(sources)] if isinstance(sources, (str, Path)) else [Path(p) for p in sources]
        return validate(self.resolver, self.scenarios, self.facts, paths, presets=presets, assign=assign,
                        samples=samples, seed=seed, calibration=calibration, default_dir=default_observations(),
                        references=set(self.tables.references), sealed=sealed)
