"""What the observatory shows, gathered from the engine and the artifacts into plain data: the catalog
(variables, relations with their maths, references, root debt), the estimate of each run file with its
breakdowns and trace, simulation outputs, and experiment protocols with their results.

Everything here is data, ordered by name, with no time stamp: the same inputs give the same site."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpustack_compiler.base.atomic import mismatched
from gpustack_compiler.base.errors import InputError

from ..analyses.breakdown import breakdown
from ..datacenter.results import FOLDER_FILES
from ..engine.facts import Breakdowns

# Simulation series are thinned to about this many points: a chart of a million events shows no more.
SERIES_POINTS = 1500


@dataclass
class RunView:
    slug: str
    path: str
    estimate: dict
    breakdowns: list[dict]
    trace: list[dict]  # one step per variable of the union of the figures' traces, in resolution order
    figure_traces: dict[str, list[str]]  # figure target -> its trace's variables in order
    error: str | None = None


@dataclass
class SimulationView:
    slug: str
    source: str  # the run file simulated, or the folder read
    result: dict
    progress: list[dict]
    failures: list[dict]
    power: list[dict]


@dataclass
class Observatory:
    catalog: dict
    debt: dict
    breakdowns: Breakdowns  # what a run page draws as parts (catalog/bindings/figures.yaml)
    runs: list[RunView] = field(default_factory=list)
    simulations: list[SimulationView] = field(default_factory=list)
    experiments: list[dict] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (what, why)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "item"


# ---- catalog -------------------------------------------------------------------------------------

def _mathml(latex: str | None) -> str | None:
    """A relation's LaTeX as MathML, which browsers render natively (no script, no CDN). Dotted names
    in `\\mathtt{...}` become one text run instead of a letter-by-letter identifier each."""
    if not latex:
        return None
    from latex2mathml.converter import convert

    text = re.sub(r"\\mathtt\{((?:[^{}\\]|\\_)*)\}", lambda m: r"\text{" + m.group(1).replace(r"\_", "_") + "}", latex)
    try:
        return convert(text)
    except Exception:  # noqa: BLE001  (a form the converter lacks is shown as its source, never lost)
        return None


def catalog_data(manifest: dict, source) -> tuple[dict, dict]:
    """The catalog for the explorer (compact keys: it is shipped to the browser), and the root debt."""
    relations, defs = {}, {}
    for name, rel in sorted(manifest["relations"].items()):
        relations[name] = {"k": rel["kind"], "v": rel.get("variant"), "def": rel.get("defines"),
                           "in": rel.get("inputs", []), "con": rel.get("constrains"), "d": rel.get("description"),
                           "tex": rel.get("latex"), "math": _mathml(rel.get("latex")), "refs": rel.get("references", []),
                           "lo": rel.get("leaves_out"), "f": f"{rel['file']}:{rel['line']}"}
        if rel.get("defines"):
            defs.setdefault(rel["defines"], []).append(name)
    variables = {}
    for name, var in sorted(manifest["variables"].items()):
        root = var.get("root") or {}
        variables[name] = {"u": var["units"], "d": var.get("description"), "s": var["system"],
                           "refs": var.get("references", []), "root": bool(var["is_root"]),
                           "fam": root.get("family"), "cat": root.get("category"), "defs": defs.get(name, []),
                           "f": f"{var['file']}:{var['line']}"}
    for name, c in sorted(manifest["constants"].items()):
        variables[name] = {"u": c["units"], "d": c.get("description"), "s": "constants", "refs": c.get("references", []),
                           "root": False, "const": c.get("value"), "defs": [], "f": f"{c['file']}:{c['line']}"}
    refs = {k: {"c": r["citation"], "y": r.get("year"), "k": r.get("kind"), "url": r.get("url"),
                "doi": r.get("doi"), "loc": r.get("locator")} for k, r in sorted(manifest["references"].items())}
    roots = source.root_debt()
    by_family: dict[str, list[dict]] = {}
    for r in roots:
        by_family.setdefault(r.family or "(undeclared)", []).append(
            {"name": r.name, "category": r.category, "blast_radius": r.weight})
    families = [{"family": f.family, "weight": f.weight, "roots": f.roots, "heaviest": list(f.heaviest),
                 "members": sorted(by_family.get(f.family, []), key=lambda x: (-x["blast_radius"], x["name"]))}
                for f in source.family_debt()]
    catalog = {"variables": variables, "relations": relations, "refs": refs,
               "systems": {k: v.get("description") for k, v in sorted(manifest["systems"].items())},
               "headline": list(manifest.get("headline_targets", [])), "stats": manifest.get("stats", {})}
    return catalog, {"families": families, "roots": len(roots)}


# ---- runs ----------------------------------------------------------------------------------------

def run_view(engine, path: Path, shown: str, samples: int, seed: int) -> RunView:
    run = engine.load_run(path)
    est = engine.estimate(run, samples, seed)
    drawn = engine.facts.breakdowns
    parts = [breakdown(engine, run, est, bd.variable, bd.split).to_dict() for bd in (drawn.step, drawn.cost)
             if any(f.target == bd.variable for f in est.figures)]
    steps: dict[str, dict] = {}
    figure_traces = {}
    for target, res in sorted(est.resolutions.items()):
        figure_traces[target] = [s.variable for s in res.trace]
        for s in res.trace:
            steps.setdefault(s.variable, s.to_dict())
    order = [v for t in (f.target for f in est.figures) for v in figure_traces.get(t, [])]
    trace = [steps[v] for v in dict.fromkeys(order)]
    return RunView(slug(path.stem), shown, est.to_dict(), parts, trace, figure_traces)


# ---- simulations ---------------------------------------------------------------------------------

def _thin(rows: list[dict], points: int = SERIES_POINTS) -> list[dict]:
    step = max(1, -(-len(rows) // points))
    return rows[::step] if step > 1 else rows


def _series(log_rows: list[dict], power_rows: list[dict]) -> tuple[list, list, list]:
    """Progress (step position over days), failures (day, cause) and node power by phase (kW) of the
    first replication, from the event log and power series a simulation writes."""
    day = 86400e9
    progress, failures = [], []
    for row in log_rows:
        if row["replication"] != 0:
            continue
        if row["kind"] == "compute":
            # Both ends of each stretch of compute, as the replay has it (and timeline.png draws it): the steps
            # grow through the stretch, and a rollback shows as the next stretch starting lower.
            progress.append({"day": row["time_ns"] / day, "position": row["position"]})
            progress.append({"day": (row["time_ns"] + row["duration_ns"]) / day, "position": row["position"] + row["count"]})
        elif row["kind"] == "failure":
            failures.append({"day": row["time_ns"] / day, "cause": row["cause"] or "unknown"})
    power = []
    for row in power_rows:
        mid = (row["start_s"] + row["width_s"] / 2) / 86400
        for key, value in sorted(row.items()):
            if key.endswith("_w") and value == value:  # NaN: a phase with no catalog power where it runs
                power.append({"day": mid, "site": row["site"], "phase": key[:-2], "kw": value / 1e3})
    return _thin(progress or [{"day": 0.0, "position": 0}]), failures, power


def simulation_from_engine(engine, path: Path, shown: str, replications: int, seed: int) -> SimulationView:
    from ..datacenter.results import PHASES, POWER_COLUMNS

    run = engine.load_run(path)
    result = engine.simulate(run, replications=replications, seed=seed)
    power_rows = []
    resolution = result.default_resolution_s()
    for site in result.sites:
        s = result.power_series(site, resolution)
        for i in range(len(s.start_s)):
            row = {"site": site, "start_s": float(s.start_s[i]), "width_s": float(s.width_s[i])}
            row.update({f"{ph}_w": float(s.power_w[ph][i]) for ph in PHASES})
            power_rows.append({k: row[k] for k in POWER_COLUMNS})
    data = result.to_dict()
    progress, failures, power = _series(list(result.log), power_rows)
    return SimulationView(slug(path.stem), shown, data, progress, failures, power)


def simulation_from_folder(folder: Path, shown: str) -> SimulationView:
    """A folder written by `gpustack simulate --out`: result.json, events.parquet, power.parquet."""
    import pyarrow.parquet as pq

    files = {n: folder / n for n in ("result.json", "events.parquet", "power.parquet")}
    absent = [n for n, p in files.items() if not p.is_file()]
    if absent:
        raise InputError(f"--simulation {shown}: no {', '.join(absent)}", "pass a folder written by "
                         "`gpustack simulate --out`")
    result = json.loads(files["result.json"].read_text(encoding="utf-8"))
    recorded = result.get("files") if isinstance(result, dict) else None
    if not isinstance(recorded, dict) or set(recorded) != set(FOLDER_FILES):
        raise InputError(f"--simulation {shown}: result.json records no hashes of its companion files",
                         "write the folder again with `gpustack simulate --out`")
    changed = mismatched(folder, recorded)
    if changed:
        raise InputError(f"--simulation {shown}: {', '.join(changed)} not the file(s) result.json records (a "
                         "folder mixing two runs, or changed since)", "write it again with `gpustack simulate --out`")
    log_rows = pq.read_table(files["events.parquet"]).to_pylist()
    power_rows = pq.read_table(files["power.parquet"]).to_pylist()
    progress, failures, power = _series(log_rows, power_rows)
    return SimulationView(slug(folder.name), shown, result, progress, failures, power)


# ---- experiments ---------------------------------------------------------------------------------

def experiments_data(directory: Path, units) -> list[dict]:
    """Each protocol (question, hypothesis, arms, metrics, frozen falsifiers) with its results."""
    from ..experiments.log import artifacts
    from ..experiments.workspace import Workspace

    ws = Workspace.at(directory)
    lock = ws.lock()
    results: dict[str, list[dict]] = {}
    for shown, art in artifacts(ws):
        results.setdefault(art.protocol.id, []).append({"path": shown, **art.to_dict()})
    out = []
    for p in sorted(ws.load_all(units), key=lambda p: (p.spec.id, p.spec.version)):
        entry = lock.get(p.key)
        out.append({"id": p.spec.id, "version": p.spec.version, "path": p.path, "sha256": p.sha256,
                    "frozen": entry is not None and entry.sha256 == p.sha256,
                    "spec": p.spec.model_dump(mode="json"),
                    "results": [r for r in results.get(p.spec.id, []) if r["protocol"]["version"] == p.spec.version]})
    return out
