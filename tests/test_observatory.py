"""The observatory site, built from the real catalog and artifacts and driven in a real headless Chromium
(Debian's /usr/bin/chromium through Playwright) from file://: pages load without console errors, charts
draw, the search opens a cone, a figure's number reaches its trace, and the explanation depth never
changes a value. A screenshot of each page is written under build/observatory-screenshots/."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpustack_sim import Engine
from gpustack_sim.observatory import build_site

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "build" / "observatory-screenshots"
RUN = ROOT / "runs" / "llama70b_1024xh100.yaml"


@pytest.fixture(scope="module")
def engine():
    return Engine.open(ROOT / "catalog")


@pytest.fixture(scope="module")
def site(engine, tmp_path_factory):
    out = tmp_path_factory.mktemp("observatory") / "site"
    report = build_site(engine, out, runs=sorted((ROOT / "runs").glob("*.yaml")), simulate_runs=[RUN],
                        experiments=ROOT / "experiments", replications=2, samples=2000, home=ROOT)
    return out, report


class Page:
    """A browser page that records console errors, uncaught exceptions and any request off file://."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.network: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("request", lambda r: None if r.url.startswith(("file:", "data:", "about:"))
                     else self.network.append(r.url))

    def open(self, site: Path, name: str, fragment: str = ""):
        self.page.goto((site / name).as_uri() + fragment)
        # Every chart the page declares has drawn (site.js marks it) or the page has none.
        self.page.wait_for_function(
            "[...document.querySelectorAll('figure[data-chart]')].every(f => f.dataset.rendered)", timeout=20000)
        return self.page


def _not_blank(png: bytes) -> None:
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    colors = img.getcolors(maxcolors=1 << 20)
    assert colors is None or len(colors) > 20, "the screenshot is nearly one colour"
    extrema = img.convert("L").getextrema()
    assert extrema[1] - extrema[0] > 100, f"no contrast in the screenshot: {extrema}"


def test_build_writes_every_page(site):
    out, report = site
    pages = sorted(p.name for p in out.glob("*.html"))
    assert {"index.html", "explorer.html", "roots.html", "experiments.html",
            "run-llama70b_1024xh100.html", "run-gpt3_175b_a100.html", "simulation-llama70b_1024xh100.html"} <= set(pages)
    assert len([p for p in pages if p.startswith("experiment-E")]) == report.experiments == 6
    text = "".join((out / p).read_text() for p in pages) + (out / "data" / "catalog.js").read_text()
    # Self-contained: no address of any other host is referenced by a script, style or image.
    for needle in ('src="http', "src='http", 'href="http://cdn', "cdn.jsdelivr", "unpkg.com"):
        assert needle not in text


def test_same_inputs_same_bytes(engine, tmp_path):
    kwargs = dict(runs=[RUN], experiments=ROOT / "experiments", samples=500, home=ROOT)
    first = build_site(engine, tmp_path / "a", **kwargs)
    second = build_site(engine, tmp_path / "b", **kwargs)
    assert first.files == second.files
    for rel in first.files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
    assert first.digest == second.digest


def test_refuses_a_folder_that_is_not_a_site(engine, tmp_path):
    from gpustack_compiler.base.errors import InputError

    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(InputError, match="not an observatory site"):
        build_site(engine, tmp_path, runs=[RUN], samples=100)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_every_page_loads_in_chromium_without_errors(site, browser):
    out, _ = site
    SHOTS.mkdir(parents=True, exist_ok=True)
    view = Page(browser)
    for html in sorted(out.glob("*.html")):
        page = view.open(out, html.name, "#training.t_step" if html.name == "explorer.html" else "")
        if html.name == "explorer.html":
            page.wait_for_function("document.getElementById('cone-graph').dataset.rendered === 'training.t_step'")
        png = page.screenshot(path=str(SHOTS / html.with_suffix(".png").name))
        _not_blank(png)
        assert page.locator("h1").inner_text()
    assert view.errors == []
    assert view.network == []


def test_charts_carry_a_text_alternative(site, browser):
    out, _ = site
    page = Page(browser).open(out, "run-llama70b_1024xh100.html")
    figures = page.locator("figure[data-chart]")
    assert figures.count() == 2
    for i in range(figures.count()):
        fig = figures.nth(i)
        assert fig.get_attribute("tabindex") == "0"
        assert "step" in fig.get_attribute("aria-label") or "cost per token" in fig.get_attribute("aria-label")
        assert fig.locator("svg").count() >= 1


def test_search_finds_a_variable_and_opens_its_cone(site, browser):
    out, _ = site
    view = Page(browser)
    page = view.open(out, "explorer.html")
    page.locator("#search").fill("t_exposed_comm")
    option = page.locator("#results a", has_text="training.t_exposed_comm")
    assert option.count() >= 1
    page.locator("#search").press("ArrowDown")
    page.keyboard.press("Enter")
    page.wait_for_function("document.getElementById('cone-graph').dataset.rendered === 'training.t_exposed_comm'")
    assert page.evaluate("location.hash") == "#training.t_exposed_comm"
    assert page.locator("#detail h2").inner_text().startswith("training.t_exposed_comm")
    assert page.locator("#units").inner_text() == "s"
    # The value in the chosen run, the defining relation in MathML, and the tree of what it is made of.
    assert page.locator("#value").inner_text().endswith(" s")
    assert page.locator("#detail math").count() >= 1
    tree = page.locator("#tree li")
    assert tree.count() > 1
    assert page.locator("#cone-graph svg").count() == 1
    assert view.errors == []


def test_a_figure_links_to_its_trace(site, browser):
    out, _ = site
    page = Page(browser).open(out, "run-llama70b_1024xh100.html")
    link = page.locator('table.figures a.value[href="#trace-training.t_step"]')
    link.click()
    assert page.evaluate("location.hash") == "#trace-training.t_step"
    section = page.locator('[id="trace-training.t_step"]')
    assert section.is_visible()
    section.locator("summary").click()
    section.locator('a[href="#step-training.t_step"]').click()
    row = page.locator('[id="step-training.t_step"]')
    assert row.is_visible()
    assert "training.t_step.compose" in row.inner_text()


def test_depth_changes_explanation_never_a_value(site, browser):
    out, _ = site
    page = Page(browser).open(out, "experiment-E001-v1.html")
    values, visible = {}, {}
    for depth in ("plain", "researcher", "full"):
        page.locator(f'input[name="depth"][value="{depth}"]').check()
        values[depth] = page.locator(".value").all_inner_texts()
        visible[depth] = len([t for t in page.locator("main").inner_text().split("\n") if t.strip()])
    assert values["plain"] and values["plain"] == values["researcher"] == values["full"]
    assert visible["plain"] < visible["researcher"] < visible["full"]


def test_a_simulate_out_folder_shows_as_the_replay_itself(engine, tmp_path):
    """Files written as `gpustack simulate --out` writes them give the same series as the replay."""
    from gpustack_sim.observatory.collect import simulation_from_engine, simulation_from_folder

    result = engine.simulate(engine.load_run(RUN), replications=2, seed=0)
    result.write_folder(tmp_path, result.to_dict())
    read = simulation_from_folder(tmp_path, "out")
    replayed = simulation_from_engine(engine, RUN, "run", replications=2, seed=0)
    assert read.progress == replayed.progress and read.failures == replayed.failures
    assert read.power == replayed.power and len(read.power) > 0
    (tmp_path / "power.parquet").unlink()
    from gpustack_compiler.base.errors import InputError

    with pytest.raises(InputError, match="no power.parquet"):
        simulation_from_folder(tmp_path, "out")
