"""`gpustack simulate` of a serving run: the fleet replay (datacenter/serving), printed and written."""

from __future__ import annotations

import json
from pathlib import Path

from gpustack_compiler.base.errors import InputError

from .app import engine, out
from .workers import chunked

CONTROL = frozenset({"migrate", "autoscale", "cap", "shed", "evacuate"})


def simulate_serving_cmd(ctx, run_file: Path, *, arrivals: str | None, hours: float | None, rate: float | None,
                         gpus: int | None, routing: str, sites_file: Path | None, seed: int, replications: int,
                         workers: int, scheduler: str, allow_violations: bool, as_json: bool,
                         out_dir: Path | None, control: str | None = None, sheddable: float | None = None) -> None:
    from ..datacenter.serving import Controller
    from ..engine.run_file import load_run

    if arrivals is None:
        raise InputError(f"{run_file}: a serving run needs --arrivals FAMILY")
    if hours is None:
        raise InputError(f"{run_file}: a serving run needs --hours H")
    if gpus is not None and gpus < 1:
        raise InputError(f"--gpus: {gpus} is not a positive count")
    if sheddable is not None and not 0 <= sheddable <= 1:
        raise InputError(f"--sheddable: {sheddable!r} is not a share between 0 and 1")
    parts = [c.strip() for c in (control or "").split(",") if c.strip()]
    unknown = sorted(set(parts) - CONTROL)
    if unknown:
        raise InputError(f"--control: unknown {', '.join(unknown)}", f"any of {', '.join(sorted(CONTROL))}")
    grid = frozenset({"evacuate": "migrate"}.get(c, c) for c in parts if c in ("cap", "shed", "evacuate"))
    controller = Controller(migrate="migrate" in parts, autoscale="autoscale" in parts, grid=grid,
                            name="+".join(parts) or "static")
    run = load_run(run_file)
    eng = engine(ctx, allow_violations=allow_violations)
    with chunked("replications", workers, scheduler) as (client, tick):
        result = eng.simulate_serving(run, arrivals=arrivals, hours=hours, sites=sites_file, routing=routing,
                                      rate=rate, gpus=gpus, seed=seed, replications=replications, client=client,
                                      progress=tick, controller=controller, sheddable_share=sheddable or 0.0)
    data = result.to_dict()
    lines = result.lines()
    if out_dir is not None:
        from gpustack_compiler.base.atomic import write_text

        out_dir.mkdir(parents=True, exist_ok=True)
        result.write_log(out_dir / "requests.parquet")
        result.write_plot(out_dir / "serving.png")
        write_text(out_dir / "result.json", json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        lines.append(f"wrote {out_dir}/result.json, requests.parquet, serving.png")
    out(data, "\n".join(lines), as_json)
