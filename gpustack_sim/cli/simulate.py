"""`gpustack simulate`: replay a run in the virtual datacenter (failures, checkpoints, recovery, power)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.limits import MAX_POWER_BINS, refuse_over

from .app import AllowViolationsOpt, JsonOpt, app, engine, json_text, out, replications_option, seed_option
from .render import fmt
from .workers import SchedulerOpt, WorkersOpt, chunked


@app.command("simulate")
def simulate_cmd(ctx: typer.Context,
                 run_file: Path = typer.Argument(..., help="Run file (schemas/run.schema.json), or a serving run "
                                                 "(schemas/serve_run.schema.json): then see --arrivals."),
                 days: float = typer.Option(None, "--days", help="Simulate this many days of wallclock."),
                 to_budget: bool = typer.Option(False, "--to-budget", help="Simulate until the token budget is "
                                                "trained (the default without --days)."),
                 seed: int = seed_option(),
                 replications: int = replications_option(1, "Independent replications."),
                 policy: str = typer.Option(None, "--policy", help="Checkpoint policy: fixed, daly (default) or "
                                            "adaptive; for a serving run the routing: round_robin, least_loaded "
                                            "(default) or kv_aware."),
                 interval: float = typer.Option(None, "--interval", help="Checkpoint interval in seconds "
                                                "(--policy fixed; default the catalog's cluster.ckpt.interval)."),
                 sites_file: Path = typer.Option(None, "--sites", help="Sites file (schemas/sites.schema.json)."),
                 workers: int = WorkersOpt, scheduler: str = SchedulerOpt,
                 explain: bool = typer.Option(False, "--explain", help="Name every catalog parameter used."),
                 allow_violations: bool = AllowViolationsOpt, as_json: bool = JsonOpt,
                 out_dir: Path = typer.Option(None, "--out", help="Write result.json, events.parquet, power.parquet "
                                              "and timeline.png here."),
                 power_resolution: float = typer.Option(None, "--power-resolution", help="Bin width in seconds of "
                                                        "power.parquet (default: about 1,000 bins over the run)."),
                 arrivals: str = typer.Option(None, "--arrivals", help="Serving run: workload family (a name in "
                                              "data/workloads/, a family .yaml or a trace .csv)."),
                 hours: float = typer.Option(None, "--hours", help="Serving run: hours of serving to replay."),
                 rate: float = typer.Option(None, "--rate", help="Serving run: requests/s (default: the run's "
                                            "workload.request_rate)."),
                 gpus: int = typer.Option(None, "--gpus", help="Serving run: GPUs of the fleet (default: the run's "
                                          "replicas)."),
                 control: str = typer.Option(None, "--control", help="Serving run: what the controller does, "
                                             "comma-separated: migrate, autoscale, and for grid dispatches in "
                                             "--sites: cap, shed, evacuate."),
                 sheddable: float = typer.Option(None, "--sheddable", help="Serving run: share of requests a "
                                                 "dispatch may defer (with --control shed).")
                 ) -> None:
    """Replay a training run with failures, checkpoints and recovery; figures with intervals over replications."""
    from ..datacenter.api import horizon_s
    from ..engine.run_file import load_run, load_training_run
    from ..engine.serve_run import ServeRunSpec

    if run_file.suffix in (".yaml", ".yml") and run_file.is_file() and isinstance(load_run(run_file), ServeRunSpec):
        from .simulate_serving import simulate_serving_cmd

        training_only = {"--days": days, "--to-budget": to_budget or None, "--interval": interval,
                         "--explain": explain or None, "--power-resolution": power_resolution}
        given = [flag for flag, value in training_only.items() if value is not None]
        if given:
            raise InputError(f"{run_file}: a serving run; only a training run takes {', '.join(given)}")
        return simulate_serving_cmd(ctx, run_file, arrivals=arrivals, hours=hours, rate=rate, gpus=gpus,
                                    routing=policy or "least_loaded", sites_file=sites_file, seed=seed,
                                    control=control, sheddable=sheddable,
                                    replications=replications, workers=workers, scheduler=scheduler,
                                    allow_violations=allow_violations, as_json=as_json, out_dir=out_dir)
    if any(v is not None for v in (arrivals, hours, rate, gpus, control, sheddable)):
        raise InputError(f"{run_file}: --arrivals, --hours, --rate, --gpus, --control and --sheddable go with a "
                         "serving run file")
    policy = policy or "daly"
    if days is not None and to_budget:
        raise InputError("--days and --to-budget exclude each other")
    if interval is not None and policy != "fixed":
        raise InputError("--interval goes with --policy fixed")
    if power_resolution is not None and not power_resolution > 0:
        raise InputError(f"--power-resolution: {power_resolution!r} s is not positive")
    if out_dir is not None:
        _check_out(out_dir)
    run = load_training_run(run_file)
    eng = engine(ctx, allow_violations=allow_violations)
    params, traces = eng.job_parameters(run)
    if power_resolution is not None and out_dir is not None:
        refuse_over(math.ceil(horizon_s(params, days) / power_resolution), MAX_POWER_BINS,
                    f"--power-resolution {power_resolution:g} s: bins over the run's {horizon_s(params, days):,.6g} s "
                    "(without failures)", "a coarser resolution")
    with chunked("replications", workers, scheduler) as (client, tick):
        result = eng.simulate(run, sites=sites_file, policy=policy, seed=seed, replications=replications, days=days,
                              interval_s=interval, client=client, progress=tick, parameters=params)
    data = result.to_dict()
    lines = _lines(result, run.name)
    if explain:
        data["parameters"] = _explained(eng.facts.training_replay, params, traces)
        lines += ["parameters from the catalog:"] + [
            f"  {p['field']:<28} {fmt(p['value'], None, p['units'])}  <- {p['variable']} ({p['trace']})"
            for p in data["parameters"]]
    if out_dir is not None:
        # result.json holds what --json prints (a non-finite number as null)
        result.write_folder(out_dir, json.loads(json_text(data)), power_resolution)
        lines.append(f"wrote {out_dir}/result.json, events.parquet, power.parquet, timeline.png")
    out(data, "\n".join(lines), as_json)


def _check_out(folder: Path) -> None:
    """The folder `--out` replaces as a whole: a new or empty one, or one simulate wrote before."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--out {folder}: not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / "result.json").is_file():
        raise InputError(f"--out {folder}: the folder holds files that are not a simulation's (it is replaced "
                         "as a whole)", "pass a new or empty folder")


_LABELS = {"useful_time_share": ("useful-time share (goodput)", "1", 1.0),
           "wallclock_s": ("wallclock", "day", 86400.0), "interruptions": ("interruptions", "1", 1.0),
           "lost_gpu_hours": ("lost GPU-hours", "GPU*h", 1.0),
           "checkpoint_overhead_share": ("checkpoint overhead share", "1", 1.0),
           "checkpoints_completed": ("checkpoints completed", "1", 1.0), "tokens": ("tokens trained", "token", 1.0),
           "energy_j": ("energy (node IT)", "MWh", 3.6e9)}


def _lines(result, name: str) -> list[str]:
    horizon = f"{result.days} days" if result.days is not None else "to the token budget"
    lines = [f"simulation of {name}: {result.replications} replication(s), seed {result.seed}, policy "
             f"{result.policy}, {horizon}; nodes per site: "
             + ", ".join(f"{s} {n}" for s, n in result.placement)]
    for key, stat in result.figures.items():
        label, units, scale = _LABELS[key]
        lines.append(f"  {label:<28} {stat.mean / scale:.6g} {units}   [p5 {stat.p5 / scale:.6g}, "
                     f"p50 {stat.p50 / scale:.6g}, p95 {stat.p95 / scale:.6g}]")
    if len(result.energy_by_site_j) > 1:
        _, units, scale = _LABELS["energy_j"]
        lines += [f"  energy at {site:<19} {stat.mean / scale:.6g} {units}   [p5 {stat.p5 / scale:.6g}, "
                  f"p95 {stat.p95 / scale:.6g}]" for site, stat in result.energy_by_site_j.items() if stat.mean]
    for cause, stat in result.interruptions_by_cause.items():
        lines.append(f"  interruptions: {cause:<14} {stat.mean:.4g}   [p5 {stat.p5:.4g}, p95 {stat.p95:.4g}]")
    w = result.work
    lines.append(f"work: attempted {w['attempted_steps']} = useful {w['useful_steps']} + lost {w['lost_steps']} steps "
                 f"(over all replications)")
    lines += [f"note: {n}" for n in result.notes]
    lines += ["excluded:"] + [f"  {e}" for e in result.excluded]
    return lines


def _explained(binding, params, traces) -> list[dict]:
    rows = []
    for field_name, var, _ in binding.parameters:
        res = traces.get(var)
        if res is None:
            rows.append({"field": field_name, "variable": var, "value": None, "units": "", "trace": "not resolved"})
            continue
        own = next((s for s in res.trace if s.variable == var), None)
        how = "assigned" if own is None or own.relation is None else f"{own.kind} {own.relation}"
        rows.append({"field": field_name, "variable": var, "value": res.value, "units": res.units,
                     "trace": f"{how}; {len(res.trace)} trace steps"})
    for cls in params.failure_classes:
        res = traces[cls.variable]
        rows.append({"field": f"failure rate {cls.name} (per {cls.per})", "variable": cls.variable,
                     "value": res.value, "units": res.units, "trace": f"{len(res.trace)} trace steps"})
    return rows
