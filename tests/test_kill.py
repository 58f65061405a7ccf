"""kill -9 at random moments of `gpustack simulate --out` and `gpustack observatory build`, each a real process
(issue 41): whatever the moment, the folder a reader accepts is whole and self-consistent, the previous one or
the new one, never a mix of the two, and a site never links to a page it lacks."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

from helpers import REPO

RUN = REPO / "runs" / "llama70b_1024xh100.yaml"
# Kill moments spread over a whole run's duration (stratified, seeded): a few per command keeps the test to
# minutes on a loaded machine.
TRIALS = 4


def command(build: Path, *args: str) -> list[str]:
    return [sys.executable, "-c", "from gpustack_sim.cli.main import main; main()", "--build-dir", str(build), *args]


def finished(build: Path, *args: str) -> float:
    """Run to the end; the seconds it took."""
    start = time.monotonic()
    proc = subprocess.run(command(build, *args), cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    return time.monotonic() - start


def killed(build: Path, after_s: float, *args: str) -> None:
    proc = subprocess.Popen(command(build, *args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        proc.wait(timeout=after_s)
    except subprocess.TimeoutExpired:
        proc.kill()  # SIGKILL
        proc.wait()


def moments(duration: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [duration * (i + rng.random()) / TRIALS for i in range(TRIALS)]


def test_a_killed_simulate_out_leaves_a_whole_folder(real_build, tmp_path) -> None:
    from gpustack_sim.observatory.collect import simulation_from_folder

    out = tmp_path / "out"
    duration = finished(real_build, "simulate", str(RUN), "--seed", "1", "--out", str(out))
    for i, after in enumerate(moments(duration, 41)):
        before = json.loads((out / "result.json").read_text())["seed"]
        killed(real_build, after, "simulate", str(RUN), "--seed", str(2 + i), "--out", str(out))
        view = simulation_from_folder(out, "out")  # checks every file against the digests result.json records
        assert view.result["seed"] in (before, 2 + i), (after, view.result["seed"])
        assert sorted(p.name for p in out.iterdir()) == ["events.parquet", "power.parquet", "result.json",
                                                         "timeline.png"]
    # the next write clears what the killed writers left beside the folder
    finished(real_build, "simulate", str(RUN), "--seed", "9", "--out", str(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def site_digest(site: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        digest.update(path.relative_to(site).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def test_a_killed_observatory_build_leaves_the_previous_site_or_the_new_one(real_build, tmp_path) -> None:
    sim = tmp_path / "sim"
    finished(real_build, "simulate", str(RUN), "--out", str(sim))
    site = tmp_path / "site"

    def build(seed: int, out: Path = site) -> list[str]:
        return ["observatory", "build", "--out", str(out), "--run", str(RUN), "--simulation", str(sim),
                "--samples", "10", "--seed", str(seed), "--experiments", str(REPO / "experiments")]

    # The two sites a build can leave (seeds 0 and 1 give different intervals): built whole once each.
    duration = finished(real_build, *build(1, tmp_path / "one"))
    finished(real_build, *build(0))
    whole = {site_digest(site): 0, site_digest(tmp_path / "one"): 1}
    assert len(whole) == 2
    for i, after in enumerate(moments(duration, 17)):
        killed(real_build, after, *build(1 - i % 2))
        assert site_digest(site) in whole, f"a mixed site after a kill at {after:.1f} s"
        pages = {p.name for p in site.glob("*.html")}
        linked = set(re.findall(r'href="([^"#/]+\.html)"', (site / "index.html").read_text()))
        assert linked <= pages, linked - pages
