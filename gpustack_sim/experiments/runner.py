"""The generic runner: a frozen protocol's panel replayed on the virtual datacenter, every arm of
replication i on the same seed (common random numbers), every metric with its interval, every
falsifier and evidence requirement evaluated, a conclusion, and a content-addressed artifact.

Conclusion rules (in this order):
1. a failed falsifier or a failed mandatory evidence requirement -> failed_virtual_screen
   (failed_real_validation at the real stage);
2. otherwise missing evidence (a requirement due at this stage that could not be evaluated) or an
   unresolved metric -> inconclusive;
3. otherwise survived_virtual (survived_real_validation). A virtual screen can reject a mechanism; it
   never validates a claim about a real datacenter: stages above virtual need measured observations."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.limits import MAX_REPLICATIONS, refuse_over

from ..distributed import Backend, chunk_ranges
from ..distributed.chunks import Progress
from .history import supersede
from .panels import PANELS
from .panels.base import Capability, MetricOutcome, PanelContext, ProportionSample, Unresolved
from .protocol import STAGES, Metric, Protocol, sha256_of
from .results import (
    ArmResult,
    Artifact,
    CommonRandomNumbers,
    DataId,
    EvidenceGap,
    EvidenceResult,
    FalsifierResult,
    MetricResult,
    MissingCapability,
    ProtocolRef,
    RunResult,
)
from .stats import clopper_pearson, compare, mean_interval
from .workspace import Workspace

PACKAGE_VERSION = "0.1.0"
RUN_ID_CHARS = 16


def code_version() -> str:
    """The package version and a hash of every Python source of the compiler and the engine: the same
    code gives the same version whatever the checkout, the clock or the machine."""
    base = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for pkg in ("gpustack_compiler", "gpustack_sim"):
        for f in sorted((base / pkg).rglob("*.py")):
            h.update(f.relative_to(base).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return f"gpustack-{PACKAGE_VERSION}+{h.hexdigest()[:16]}"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- the run ---------------------------------------------------------------------------------------

def run_protocol(ref: str, *, workspace: Workspace, engine_factory, stage: str = "virtual",
                 replications: int | None = None, seed: int | None = None, client=None,
                 observations: Path | None = None, progress: Progress | None = None,
                 write: bool = True) -> RunResult:
    """Run protocol `ref` (E001 or E001@2) at `stage`; write the artifact under results/<id>/ unless
    `write` is False. `engine_factory()` gives the engine (called once, when first needed). Replications
    run in chunks, here or on the Dask cluster of `client`; `progress(done, total)` hears of chunks done."""
    if stage not in STAGES:
        raise InputError(f"--stage {stage!r}: one of {', '.join(STAGES)}")
    engine = engine_factory()
    protocol = workspace.load(ref, engine.units)
    workspace.require_frozen(protocol)
    spec = protocol.spec
    panel = PANELS.get(spec.id)
    if panel is None:
        raise InputError(f"{protocol.path}: no panel for {spec.id} in gpustack_sim/experiments/panels")
    if set(panel.arms) != set(protocol.arms):
        raise InputError(f"{protocol.path}: the panel replays arms {', '.join(panel.arms)}, the protocol names "
                         f"{', '.join(protocol.arms)}")
    n = spec.planned_sample_size if replications is None else replications
    if n < 1:
        raise InputError(f"--replications {n}: at least 1")
    refuse_over(n, MAX_REPLICATIONS, "--replications")
    seed = spec.seed_policy.default_seed if seed is None else seed
    if seed < 0:
        raise InputError(f"--seed {seed}: not negative")
    obs_ids = _observations(protocol, stage, observations, workspace)

    ctx = PanelContext(protocol, workspace.root, stage, lambda: engine)
    outcomes: dict[str, MetricOutcome]
    runs = dict.fromkeys(protocol.arms, 0)
    crn = CommonRandomNumbers(used=spec.seed_policy.common_random_numbers, verified=None,
                              description="replication i of every arm replays with the i-th seed spawned from "
                                          f"SeedSequence({seed}), so arms are compared on the same failure trace")
    assumptions: list[str] = []
    calibration: list[tuple[str, str]] = []
    due = [m.name for m in spec.metrics if STAGES.index(m.earliest_stage) <= STAGES.index(stage)]
    if stage == "virtual":
        prepared = panel.prepare(ctx)
        assumptions += prepared.assumptions
        calibration += prepared.calibration_ids
        if prepared.replays:
            observed = _replicate(panel, prepared.state, protocol.arms, n, seed, Backend(client), progress,
                                  spec.seed_policy.common_random_numbers)
            runs = {arm: len(v) for arm, v in observed.items()}
            crn = crn.model_copy(update={"verified": _crn_holds(observed)
                                         if spec.seed_policy.common_random_numbers else None})
            outcomes = panel.metrics(prepared.state, observed) if prepared.local is None \
                else panel.metrics(prepared.state, observed, prepared.local)
        else:
            outcomes = {}
    else:
        outcomes = panel.observed(observations, due)
    metrics = [_metric(protocol, m, outcomes, panel, stage, engine.units) for m in spec.metrics]

    falsifiers = [_falsifier(protocol, f, metrics) for f in spec.falsifiers]
    evidence = [_evidence(e, metrics, falsifiers, stage) for e in spec.evidence_requirements]
    conclusion, reasons = conclude(stage, metrics, falsifiers, evidence)
    if n < spec.planned_sample_size:
        reasons.append(f"ran {n} replications, fewer than the planned {spec.planned_sample_size}")
    assumptions += [
        "intervals: Student's t over replications for means, exact Clopper-Pearson for proportions; each bound "
        "of a level-L interval is a one-sided bound at (1 + L) / 2",
        "ratios are taken per replication between arms on the same seed, then averaged",
    ]
    evaluation = [DataId(id=i, name=name) for i, name in obs_ids]
    calibration_ids = [DataId(id=i, name=name) for i, name in sorted(set(calibration))]
    overlap = {d.id for d in calibration_ids} & {d.id for d in evaluation}
    if overlap:
        raise InputError(f"calibration and evaluation data overlap ({', '.join(sorted(overlap))}): data fitted "
                         "into the model cannot grade it")

    scenario_files = {}
    for rel in (spec.scenario.run, spec.scenario.sites):
        if rel is not None and (workspace.root / rel).is_file():
            scenario_files[rel] = file_sha256(workspace.root / rel)
    parameters = {"stage": stage, "replications": n, "panel": spec.id, "scenario_files": scenario_files,
                  "observations": {name: i for i, name in obs_ids}}
    catalog_hash = engine.tables.catalog_hash
    version = code_version()
    run_id = sha256_of({"protocol_sha256": protocol.sha256, "code_version": version, "catalog_hash": catalog_hash,
                        "seed": seed, "parameters": parameters})[:RUN_ID_CHARS]
    body = dict(
        run_id=run_id,
        protocol=ProtocolRef(id=spec.id, version=spec.version, title=spec.title, sha256=protocol.sha256,
                             snapshot=protocol.data),
        stage=stage, code_version=version, catalog_hash=catalog_hash, seed=seed, parameters=parameters,
        arms=[ArmResult(id=a, role="baseline" if a in {b.id for b in spec.baselines} else "candidate",
                        replications_run=runs[a]) for a in protocol.arms],
        common_random_numbers=crn, metrics=metrics, falsifiers=falsifiers, evidence=evidence,
        conclusion=conclusion, conclusion_reasons=reasons,
        missing_capabilities=_capabilities(metrics, outcomes, panel),
        evidence_gaps=_gaps(protocol, metrics, evidence, stage),
        assumptions=assumptions, calibration_ids=calibration_ids, evaluation_ids=evaluation)
    unsigned = Artifact(**body, artifact_sha256="").to_dict()
    unsigned.pop("artifact_sha256")
    artifact = Artifact(**body, artifact_sha256=sha256_of(unsigned))
    path = workspace.results_dir / spec.id / f"{run_id}.json"
    reused = False
    if write:
        reused = write_artifact(artifact, path)
        if not reused:
            supersede(artifact, path, load_artifact)
    return RunResult(artifact=artifact, path=workspace.shown(path), reused=reused)


def artifact_text(artifact: Artifact) -> str:
    return json.dumps(artifact.to_dict(), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def write_artifact(artifact: Artifact, path: Path) -> bool:
    """Write atomically (temporary file, then rename); True if an identical file was already there."""
    from gpustack_compiler.base.atomic import write_text

    return not write_text(path, artifact_text(artifact))


def _observations(protocol: Protocol, stage: str, observations: Path | None, ws: Workspace) -> list[tuple[str, str]]:
    """At the real stage: one measured file per real-validation requirement, as (sha256:<hex>, name)."""
    if stage == "virtual":
        if observations is not None:
            raise InputError("--observations goes with --stage real: a virtual screen uses no measurements")
        return []
    reqs = protocol.spec.real_validation
    if not reqs:
        raise InputError(f"{protocol.path}: --stage {stage}: the protocol declares no real_validation "
                         "requirements, so nothing measured could validate it")
    if observations is None or not observations.is_dir():
        raise InputError(f"--stage {stage} needs measured observations (--observations DIR) for: "
                         + "; ".join(f"{r.id} ({r.observable}, at least {r.minimum_samples} samples)" for r in reqs),
                         "a virtual screen can reject a mechanism but never validates a real-datacenter claim")
    out, missing = [], []
    for r in reqs:
        found = sorted(p for p in observations.iterdir() if p.is_file() and p.stem == r.id)
        if not found:
            missing.append(f"{r.id} ({r.observable})")
        for p in found:
            out.append((f"sha256:{file_sha256(p)}", f"observation {r.id}: {p.name}"))
    if missing:
        raise InputError(f"--stage {stage}: {observations} holds no measured observations for: "
                         + "; ".join(missing), "one file per requirement, named <id>.<ext>")
    return out


# ---- replications ----------------------------------------------------------------------------------

# Replications of one arm per chunk sent to a worker.
REPLICATION_CHUNK = 4


def _task(shared: tuple[str, object], chunk: list[tuple[str, int]]) -> list[dict]:
    panel_id, state = shared
    return [PANELS[panel_id].replay(state, arm, seed) for arm, seed in chunk]


def replication_seeds(seed: int, n: int) -> list[int]:
    return [int(s.generate_state(1, np.uint64)[0]) for s in np.random.SeedSequence(seed).spawn(n)]


def _replicate(panel, state, arms: Sequence[str], n: int, seed: int, backend: Backend, progress: Progress | None,
               common: bool) -> dict[str, list[dict]]:
    seeds = replication_seeds(seed, n)
    # Without common random numbers each arm gets its own stream of seeds.
    arm_seeds = {arm: seeds if common else replication_seeds(seed + 1 + k, n) for k, arm in enumerate(arms)}
    jobs = [(arm, arm_seeds[arm][i]) for i in range(n) for arm in arms]
    chunks = [jobs[a:b] for a, b in chunk_ranges(len(jobs), REPLICATION_CHUNK * len(arms))]
    results = [r for part in backend.map(_task, (panel.protocol_id, state), chunks, progress) for r in part]
    out: dict[str, list[dict]] = {arm: [] for arm in arms}
    for (arm, _), r in zip(jobs, results):
        out[arm].append(r)
    return out


def _crn_holds(observed: Mapping[str, Sequence[dict]]) -> bool:
    """Every arm of a replication saw the same failures: each arm's failure times are a prefix of the
    longest arm's (an arm that finishes earlier sees fewer of them)."""
    arms = list(observed)
    for i in range(len(observed[arms[0]])):
        traces = [tuple(observed[a][i].get("failure_times_ns", ())) for a in arms]
        longest = max(traces, key=len)
        if any(t != longest[:len(t)] for t in traces):
            return False
    return True


# ---- metrics, falsifiers, evidence -----------------------------------------------------------------

def _metric(protocol: Protocol, m: Metric, outcomes: Mapping[str, MetricOutcome], panel, stage: str,
            units) -> MetricResult:
    common = dict(name=m.name, unit=m.unit, primary=m.primary, estimator=m.estimator, interval_level=m.interval)
    if STAGES.index(m.earliest_stage) > STAGES.index(stage):
        return MetricResult(**common, status="deferred", evidence_class="unmeasured",
                            notes=[f"first measurable at the {m.earliest_stage} stage"])
    outcome = outcomes.get(m.name)
    if outcome is None:
        missing = panel.missing or (Capability("panel_metric", f"panel {panel.protocol_id} computes no metric "
                                                               f"{m.name}"),)
        outcome = Unresolved(tuple(missing))
    if isinstance(outcome, Unresolved):
        return MetricResult(**common, status="unresolved", missing_capabilities=[c.name for c in outcome.missing],
                            notes=list(outcome.notes), evidence_class=outcome.evidence)
    scale = _unit_scale(outcome.unit, m, units, panel.protocol_id)
    if isinstance(outcome, ProportionSample):
        if m.estimator != "proportion" or outcome.unit != "1":
            raise InputError(f"panel {panel.protocol_id}: metric {m.name}: a proportion for a {m.estimator} metric")
        lo, hi = clopper_pearson(outcome.successes, outcome.trials, m.interval)
        return MetricResult(**common, status="resolved", point=outcome.successes / outcome.trials, lower=lo,
                            upper=hi, samples=outcome.trials, successes=outcome.successes, notes=list(outcome.notes),
                            evidence_class=outcome.evidence)
    values = [v * scale for v in outcome.values]
    if not values or not all(math.isfinite(v) for v in values):
        return MetricResult(**common, status="unresolved", missing_capabilities=[], evidence_class="unmeasured",
                            notes=list(outcome.notes) + ["no finite values to estimate from"])
    mean, lo, hi, sd = mean_interval(values, m.interval)
    notes = list(outcome.notes) + ([] if lo is not None else ["one replication: no interval"])
    return MetricResult(**common, status="resolved", point=mean, lower=lo, upper=hi, samples=len(values), sd=sd,
                        notes=notes, evidence_class=outcome.evidence)


def _unit_scale(unit: str, m: Metric, units, panel_id: str) -> float:
    got, want = units.parse(unit), units.parse(m.unit)
    if got.dim != want.dim:
        raise InputError(f"panel {panel_id}: metric {m.name}: computed in {unit!r}, the protocol says {m.unit!r}")
    return got.scale / want.scale


def _falsifier(protocol: Protocol, f, metrics: Sequence[MetricResult]) -> FalsifierResult:
    metric = next(m for m in metrics if m.name == f.metric)
    t = protocol.thresholds[f.id]
    written = str(f.threshold) + (f" .. {f.upper}" if f.upper is not None else "")
    common = dict(id=f.id, metric=f.metric, op=f.op, bound=f.bound, threshold=t.value, upper=t.upper,
                  threshold_as_written=written)
    if metric.status == "deferred":
        return FalsifierResult(**common, status="deferred", reason=f"metric {metric.name} is measured at a later stage")
    if metric.status == "unresolved":
        what = ", ".join(metric.missing_capabilities) or "; ".join(metric.notes)
        return FalsifierResult(**common, status="unresolved", reason=f"metric {metric.name} unresolved: {what}")
    value = {"lower": metric.lower, "point": metric.point, "upper": metric.upper}[f.bound]
    if value is None:
        return FalsifierResult(**common, status="unresolved",
                               reason=f"metric {metric.name} has no {f.bound} bound (fewer than 2 samples)")
    ok = compare(value, f.op, t.value, t.upper)
    rel = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}.get(f.op)
    cond = f"in [{t.value:.6g}, {t.upper:.6g}]" if f.op == "between" else f"{rel} {t.value:.6g}"
    return FalsifierResult(**common, compared_value=value, status="passed" if ok else "failed",
                           reason=f"{f.bound} {value:.6g} {'is' if ok else 'is not'} {cond}")


def _evidence(e, metrics: Sequence[MetricResult], falsifiers: Sequence[FalsifierResult], stage: str) -> EvidenceResult:
    common = dict(id=e.id, kind=e.kind, mandatory=e.mandatory, earliest_stage=e.earliest_stage,
                  acceptance=e.acceptance + (f" {e.min_samples}" if e.min_samples else ""), metrics=list(e.metrics))
    if STAGES.index(e.earliest_stage) > STAGES.index(stage):
        return EvidenceResult(**common, status="deferred", reason=f"due at the {e.earliest_stage} stage")
    need = [m for m in metrics if m.name in e.metrics]
    deferred = [m.name for m in need if m.status == "deferred"]
    if deferred:
        return EvidenceResult(**common, status="deferred", reason=f"{', '.join(deferred)} measured at a later stage")
    unresolved = [m for m in need if m.status == "unresolved"]
    if unresolved:
        return EvidenceResult(**common, status="missing", reason="; ".join(
            f"{m.name} unresolved ({', '.join(m.missing_capabilities) or 'no value'})" for m in unresolved))
    if e.acceptance == "resolved":
        no_interval = [m.name for m in need if m.lower is None or m.upper is None]
        if no_interval:
            return EvidenceResult(**common, status="missing", reason=f"no interval for {', '.join(no_interval)}")
        return EvidenceResult(**common, status="satisfied", reason="every required metric resolved with an interval")
    if e.acceptance == "min_samples":
        short = [f"{m.name} ({m.samples})" for m in need if m.samples < e.min_samples]
        if short:  # too little data says nothing against the mechanism: missing, not failed
            return EvidenceResult(**common, status="missing",
                                  reason=f"fewer than {e.min_samples} samples: {', '.join(short)}")
        return EvidenceResult(**common, status="satisfied", reason=f"every required metric rests on >= {e.min_samples}")
    mine = [f for f in falsifiers if f.metric in e.metrics]
    failed = [f.id for f in mine if f.status == "failed"]
    if failed:
        return EvidenceResult(**common, status="failed", reason=f"falsifiers failed: {', '.join(failed)}")
    open_ = [f.id for f in mine if f.status in ("unresolved", "deferred")]
    if open_:
        return EvidenceResult(**common, status="missing", reason=f"falsifiers not evaluated: {', '.join(open_)}")
    return EvidenceResult(**common, status="satisfied", reason="every falsifier on the required metrics passed")


def conclude(stage: str, metrics: Sequence[MetricResult], falsifiers: Sequence[FalsifierResult],
             evidence: Sequence[EvidenceResult]) -> tuple[str, list[str]]:
    """The conclusion and the reasons for it (see the module docstring for the rules)."""
    failed_name = "failed_virtual_screen" if stage == "virtual" else "failed_real_validation"
    survived = "survived_virtual" if stage == "virtual" else "survived_real_validation"
    failed = [f"falsifier {f.id} failed: {f.metric} {f.reason}" for f in falsifiers if f.status == "failed"]
    failed += [f"mandatory evidence {e.id} failed: {e.reason}" for e in evidence
               if e.mandatory and e.status == "failed"]
    open_ = [f"evidence {e.id} missing: {e.reason}" for e in evidence if e.status == "missing"]
    open_ += [f"metric {m.name} unresolved" + (f" (needs {', '.join(m.missing_capabilities)})"
                                               if m.missing_capabilities else "")
              for m in metrics if m.status == "unresolved"]
    open_ += [f"falsifier {f.id} unresolved: {f.reason}" for f in falsifiers if f.status == "unresolved"]
    if failed:
        return failed_name, failed + [f"also open: {o}" for o in open_]
    if open_:
        return "inconclusive", open_
    reasons = ["every falsifier due at this stage passed and every evidence requirement due was satisfied"]
    if stage == "virtual":
        reasons.append("a virtual screen validates no claim about a real datacenter")
    return survived, reasons


def _capabilities(metrics: Sequence[MetricResult], outcomes: Mapping[str, MetricOutcome],
                  panel) -> list[MissingCapability]:
    described: dict[str, str] = {c.name: c.description for c in panel.missing}
    for o in outcomes.values():
        if isinstance(o, Unresolved):
            described.update({c.name: c.description for c in o.missing})
    needed: dict[str, list[str]] = {}
    for m in metrics:
        for c in m.missing_capabilities:
            needed.setdefault(c, []).append(m.name)
    return [MissingCapability(name=c, description=described.get(c, c), needed_by=needed[c]) for c in sorted(needed)]


def _gaps(protocol: Protocol, metrics: Sequence[MetricResult], evidence: Sequence[EvidenceResult],
          stage: str) -> list[EvidenceGap]:
    gaps = []
    for e in evidence:
        if e.status == "missing":
            gaps.append(EvidenceGap(source=f"requirement:{e.id}", stage=stage, reason=e.reason))
        elif e.status == "deferred":
            gaps.append(EvidenceGap(source=f"requirement:{e.id}", stage=e.earliest_stage, reason=e.reason))
    covered = {n for e in protocol.spec.evidence_requirements for n in e.metrics}
    for m in metrics:
        if m.status == "unresolved" and m.name not in covered:
            gaps.append(EvidenceGap(source=f"metric:{m.name}", stage=stage,
                                    reason=f"unresolved ({', '.join(m.missing_capabilities) or 'no value'})"))
    if stage == "virtual":
        gaps += [EvidenceGap(source=f"real_validation:{r.id}", stage="real",
                             reason=f"measure {r.observable} (at least {r.minimum_samples} samples)")
                 for r in protocol.spec.real_validation]
    return gaps


def load_artifact(path: Path) -> Artifact:
    """Read an artifact back, checking its schema and its own hash."""
    from pydantic import ValidationError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        artifact = Artifact.model_validate(data)
    except (OSError, ValueError, ValidationError) as exc:
        raise InputError(f"{path}: not a readable experiment artifact ({str(exc).splitlines()[0]})") from None
    unsigned = artifact.to_dict()
    unsigned.pop("artifact_sha256")
    if sha256_of(unsigned) != artifact.artifact_sha256:
        raise InputError(f"{path}: artifact_sha256 does not match its content (edited after it was written?)")
    return artifact


__all__ = ["code_version", "conclude", "load_artifact", "run_protocol", "write_artifact"]
