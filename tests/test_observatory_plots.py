"""`gpustack estimate --plot` and `gpustack sweep --plot`: PNG files, not blank, the same bytes twice."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "runs" / "llama70b_1024xh100.yaml"


def gp(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["python3", "-c", "from gpustack_sim.cli.main import main; main()", *args], cwd=cwd,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def _png(path: Path) -> bytes:
    from PIL import Image

    data = path.read_bytes()
    img = Image.open(io.BytesIO(data)).convert("L")
    low, high = img.getextrema()
    assert high - low > 100 and len(img.getcolors(1 << 16) or range(300)) > 10, "a blank plot"
    return data


def test_estimate_plot_is_deterministic(tmp_path):
    for name in ("a.png", "b.png"):
        done = gp("estimate", str(RUN), "--samples", "300", "--plot", str(tmp_path / name))
        assert done.returncode == 0, done.stderr
        assert f"wrote {tmp_path / name}" in done.stdout
    assert _png(tmp_path / "a.png") == _png(tmp_path / "b.png")


def test_sweep_plot_marks_the_best(tmp_path):
    done = gp("sweep", str(RUN), "--grid", "tp=4,8", "--grid", "pp=2,4", "--top", "1", "--plot", str(tmp_path / "s.png"),
              "--json")
    assert done.returncode == 0, done.stderr
    import json

    assert len(json.loads(done.stdout)["top"]) == 1  # the plot shows every valid layout; the output keeps --top
    _png(tmp_path / "s.png")
    bad = gp("estimate", str(RUN), "--samples", "10", "--plot", str(tmp_path / "no" / "dir" / "x.png"))
    assert bad.returncode == 2 and bad.stderr.startswith("Error:")
