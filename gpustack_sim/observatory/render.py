"""Writes the observatory as static files: HTML pages from Jinja templates, the catalog as a script the
explorer loads (a script, not a fetched JSON file, so the site works from file://), the charts'
specifications inline, and the Vega, Vega-Lite and vega-embed JavaScript from the vl-convert wheel.

Nothing carries a time stamp and every collection is written in a fixed order: the same observatory gives
byte-identical files."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

from gpustack_compiler.base.atomic import write_folder
from gpustack_compiler.base.errors import InputError

from ..experiments.log import conclusion_at
from . import charts
from .collect import Observatory

# Marks a folder as a site this command wrote, so a rebuild may empty it and nothing else is ever removed.
MARKER = ".gpustack-observatory"
PLAIN = {
    "failed_virtual_screen": "The idea did not survive a test in the simulated datacenter: at least one of the "
                             "conditions fixed in advance to reject it was met.",
    "inconclusive": "The evidence is not enough to say yes or no: something needed is missing, so the question stays open.",
    "survived_virtual": "The idea survived the simulated test. That does not show it works in a real datacenter.",
    "failed_real_validation": "Measurements from a real datacenter rejected the idea.",
    "survived_real_validation": "The idea survived measurements from a real datacenter.",
}


def _num(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:.4g}"


@lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one classic script. Wrapped in a function so the bundle's
    top-level names stay its own; it publishes `vegaEmbed`, `vega` and `vegaLite` on `window` itself."""
    import vl_convert

    return "(function () {\n" + vl_convert.javascript_bundle() + "\n})();\n"


def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    # finalize: a value a page prints that is absent (None) shows as a dash, never the literal `None`.
    env = Environment(loader=PackageLoader("gpustack_sim.observatory", "templates"),
                      autoescape=select_autoescape(["html"]), undefined=StrictUndefined, keep_trailing_newline=True,
                      finalize=lambda value: "–" if value is None else value)
    env.filters["num"] = _num
    env.policies["json.dumps_kwargs"] = {"sort_keys": True}
    return env


def check_out(out: Path) -> None:
    """The folder a build replaces as a whole: a new one, an empty one, or one this command wrote before."""
    if out.exists():
        if not out.is_dir():
            raise InputError(f"--out {out}: not a folder")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise InputError(f"--out {out}: the folder holds files that are not an observatory site",
                             "pass an empty or new folder")


def write(obs: Observatory, out: Path, catalog_hash: str) -> list[str]:
    """Every file of the site, built in a folder beside `out` that then takes its place whole (a killed build
    leaves the previous site as it was); returns their paths relative to it, in order."""
    check_out(out)
    written: list[str] = []
    write_folder(out, lambda tmp: _fill(obs, tmp, catalog_hash, written))
    return written


def _fill(obs: Observatory, out: Path, catalog_hash: str, written: list[str]) -> None:
    (out / "assets").mkdir()
    (out / "data").mkdir()
    env = _environment()

    def put(rel: str, text: str) -> None:
        (out / rel).write_text(text, encoding="utf-8", newline="\n")
        written.append(rel)

    put(MARKER, "Written by `gpustack observatory build`; a rebuild replaces this folder.\n")
    put("assets/vega.js", vega_bundle())
    for name in ("site.css", "site.js", "explorer.js"):
        put(f"assets/{name}", resources.files("gpustack_sim.observatory").joinpath("assets", name).read_text("utf-8"))
    run_values = {r.slug: {"path": r.path, "href": f"run-{r.slug}.html",
                           "values": {s["variable"]: {"v": _num(s["value"]), "u": s["units"], "rel": s["relation"],
                                                      "variant": s["variant"], "note": s["note"]} for s in r.trace}}
                  for r in obs.runs}
    payload = json.dumps({"catalog": obs.catalog, "runs": run_values}, sort_keys=True, separators=(",", ":"))
    # `</` would end the script element early were this inlined; as a file it is escaped all the same.
    put("data/catalog.js", "window.GPUSTACK = " + payload.replace("</", "<\\/") + ";\n")

    nav_runs = [{"href": f"run-{r.slug}.html", "label": r.slug} for r in obs.runs]
    nav_sims = [{"href": f"simulation-{s.slug}.html", "label": s.slug} for s in obs.simulations]
    common = {"nav_runs": nav_runs, "nav_sims": nav_sims, "catalog_hash": catalog_hash, "charts": None}

    def page(template: str, rel: str, **context) -> None:
        put(rel, env.get_template(template).render(**{**common, "page": rel, **context}))

    def figure(r, target):
        f = next((f for f in r.estimate["figures"] if f["target"] == target), None)
        return f"{_num(f['value'])} {f['units']}" if f and f["value"] is not None else "not resolved"

    step, cost = obs.breakdowns.step, obs.breakdowns.cost
    runs_index = [{"href": f"run-{r.slug}.html", "path": r.path, "slug": r.slug,
                   "step": figure(r, step.variable), "cost": figure(r, cost.variable)} for r in obs.runs]
    page("index.html", "index.html", title="gpustack observatory",
         headline=obs.catalog["headline"], stats=obs.catalog["stats"], runs=runs_index,
         sims=[{"href": f"simulation-{s.slug}.html", "source": s.source} for s in obs.simulations],
         n_experiments=len(obs.experiments), debt=obs.debt, skipped=obs.skipped)
    page("explorer.html", "explorer.html", title="Cone explorer", charts=True, runs=runs_index,
         headline=obs.catalog["headline"], cone_spec=charts.cone_graph())
    page("roots.html", "roots.html", title="Root debt by family", debt=obs.debt)
    for r in obs.runs:
        specs = [(charts.waterfall(bd) if bd["target"] == step.variable else charts.cost_bar(bd, cost.groups))
                 if bd["parts"] else None for bd in r.breakdowns]
        page("run.html", f"run-{r.slug}.html", title=f"Run {r.estimate['run']}", run=r, charts=specs)
    for s in obs.simulations:
        specs = [charts.progress({"progress": s.progress, "failures": s.failures}),
                 charts.failures_by_cause(s.result) if s.result["interruptions_by_cause"] else None,
                 charts.power({"power": s.power}) if s.power else None]
        page("simulation.html", f"simulation-{s.slug}.html", title=f"Simulation of {s.source}", sim=s, charts=specs)
    listed = []
    for e in obs.experiments:
        href = f"experiment-{e['id']}-v{e['version']}.html"
        listed.append({**e, "href": href, "conclusion": conclusion_at(
            [(r["conclusion"], r["stage"], r["catalog_hash"]) for r in e["results"]], catalog_hash)})
        specs = [charts.metrics(r, r["falsifiers"]) for r in e["results"]]
        page("experiment.html", href, title=f"{e['id']} v{e['version']}: {e['spec']['title']}", e=e, charts=specs,
             plain=PLAIN, body_class="depth-plain")
    page("experiments.html", "experiments.html", title="Experiments", experiments=listed)
