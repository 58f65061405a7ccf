"""`gpustack observatory build`: the static site of the catalog, the run files' estimates, simulations and
experiments."""

from __future__ import annotations

from pathlib import Path

import typer

from .app import JsonOpt, app, engine, out, replications_option, seed_option, settings

observatory = typer.Typer(no_args_is_help=True, help="The observatory: a static site that opens from file://.")
app.add_typer(observatory, name="observatory")


@observatory.command("build")
def build_cmd(ctx: typer.Context,
              out_dir: Path = typer.Option(Path("site"), "--out", help="Folder to write (new, empty, or a site "
                                           "built before, which is replaced)."),
              runs: list[Path] = typer.Option([], "--run", help="Run file to estimate (default: runs/*.yaml "
                                              "beside the catalog)."),
              simulation: list[Path] = typer.Option([], "--simulation", help="Folder written by "
                                                    "`gpustack simulate --out` to show."),
              simulate: list[Path] = typer.Option([], "--simulate", help="Run file to replay in the virtual "
                                                  "datacenter (default, without --simulation: every run file)."),
              replications: int = replications_option(3, "Replications per --simulate run."),
              experiments: Path = typer.Option(None, "--experiments", help="Experiments folder (default: "
                                               "experiments/ beside the catalog, when there is one)."),
              samples: int = typer.Option(10000, "--samples", min=2, help="Monte Carlo samples per estimate."),
              seed: int = seed_option(0, "Random seed (same seed, same site)."),
              as_json: bool = JsonOpt) -> None:
    """Build the site: cone explorer, root debt, one page per run, simulation and experiment."""
    from ..observatory import build_site

    home = settings(ctx).catalog.resolve().parent
    runs = runs or sorted((home / "runs").glob("*.yaml"))
    if not simulate and not simulation:
        simulate = list(runs)
    if experiments is None and (home / "experiments").is_dir():
        experiments = home / "experiments"
    report = build_site(engine(ctx), out_dir, runs=runs, simulations=simulation, simulate_runs=simulate,
                        experiments=experiments, replications=replications, samples=samples, seed=seed, home=home)
    lines = [f"wrote {len(report.files)} files to {report.out}/ (open {report.out}/index.html): {report.runs} run(s), "
             f"{report.simulations} simulation(s), {report.experiments} experiment(s); sha256 {report.digest[:16]}"]
    lines += [f"  left out: {what}: {why}" for what, why in report.skipped]
    out(report.to_dict(), "\n".join(lines), as_json)
