"""Neo4j Browser files: the GraSS style parses, is generated from the catalog's systems and styles the
labels the loader writes; the guide is generated from the current cookbook and every one of its runnable
queries runs against the real test server; and, in a real Chromium, the Browser address `neo4j start`
prints connects at once when auth is off, plays the guide and applies the style (a node's fill is its
system's colour, a root's size its root debt)."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from helpers import LocalServer, unavailable

from gpustack_compiler.neo4j.load import extra_labels
from gpustack_compiler.neo4j.server import operations as server
from gpustack_compiler.neo4j.server.browser.guide import (
    COOKBOOK,
    GUIDE,
    STYLE,
    cookbook_queries,
    guide_html,
    guide_queries,
)
from gpustack_compiler.neo4j.server.browser.style import catalog_systems, style_grass

RULE = re.compile(r'\s*([A-Za-z][\w.]*)\s*\{((?:[^{}"]|"[^"]*")*)\}', re.S)  # captions hold braces in quotes
DECL = re.compile(r"^\s*([a-z-]+)\s*:\s*(.+?)\s*$")


def parse_grass(text: str) -> dict[str, dict[str, str]]:
    """Selector -> declarations; fails on anything that is not `selector { key: value; ... }`."""
    rules, pos = {}, 0
    for m in RULE.finditer(text):
        assert text[pos:m.start()].strip() == "", f"unparsed text before {m.group(1)}"
        decls = {}
        for item in filter(str.strip, m.group(2).split(";")):
            d = DECL.match(item)
            assert d, f"{m.group(1)}: bad declaration {item!r}"
            decls[d.group(1)] = d.group(2)
        rules[m.group(1)] = decls
        pos = m.end()
    assert text[pos:].strip() == ""
    return rules


def test_style_is_generated_from_the_systems():
    assert STYLE.read_text(encoding="utf-8") == style_grass(catalog_systems()), \
        "stale: python -m gpustack_compiler.neo4j.server.browser.style"


def test_style_parses_and_sets_the_labels_apart():
    rules = parse_grass(STYLE.read_text())
    assert {"node", "relationship", "node.Variable", "node.Root", "node.Constant", "node.Relation"} <= set(rules)
    # every label the loader can give a variable has a rule, and each system its own colour
    systems = catalog_systems()
    labels = {label for system in systems for debt in (None, 1, 10, 100)
              for label in extra_labels({"system": system, "is_root": True, "is_leaf": True}, debt)}
    assert {f"node.{label}" for label in labels} <= set(rules)
    colours = [rules[f"node.Sys_{s}"]["color"] for s in systems]
    assert len(set(colours)) == len(colours)
    for sel, decls in rules.items():
        for key, value in decls.items():
            if key.endswith("color") or key == "color":
                assert re.fullmatch(r"#[0-9A-Fa-f]{6}", value), (sel, key, value)
            if key in ("diameter", "shaft-width", "font-size", "border-width", "padding"):
                assert re.fullmatch(r"\d+px", value), (sel, key, value)
            if key == "caption":
                assert re.fullmatch(r'"(\{\w+\}|<type>|<id>)"', value), (sel, value)
    # Roots (modelling debt) are ringed and larger the more they move; constants have a colour of their own.
    assert rules["node.Root"]["border-color"] != rules["node.Variable"]["border-color"]
    assert rules["node.Constant"]["color"] not in colours + [rules["node.Variable"]["color"]]
    sizes = [int(rules[f"node.Debt{n}"]["diameter"][:-2]) for n in (1, 10, 100)]
    assert int(rules["node.Variable"]["diameter"][:-2]) < sizes[0] < sizes[1] < sizes[2]
    # later rules win in Browser: the system colours after Variable's, the debt sizes after Root's
    order = list(rules)
    assert order.index("node.Variable") < order.index(f"node.Sys_{systems[0]}")
    assert order.index("node.Root") < order.index("node.Debt1")


def test_guide_is_the_current_cookbook():
    markdown = COOKBOOK.read_text(encoding="utf-8")
    assert GUIDE.read_text(encoding="utf-8") == guide_html(markdown), \
        "stale: python -m gpustack_compiler.neo4j.server.browser.guide"
    queries = guide_queries(GUIDE.read_text(encoding="utf-8"))
    assert queries == [q for _, _, q in cookbook_queries(markdown)]
    assert len(queries) >= 15


def test_browser_address_connects_without_login_when_auth_is_off():
    off = server._uris(7687, 7474, auth=False)["browser_url"]
    assert off == "http://127.0.0.1:7474/browser/?dbms=bolt://127.0.0.1:7687&preselectAuthMethod=NO_AUTH"
    assert "preselectAuthMethod" not in server._uris(7687, 7474, auth=True)["browser_url"]


@pytest.fixture(scope="module")
def guide_db(real_graph):
    drv = real_graph.new_driver()
    yield drv, real_graph.settings.database
    drv.close()


@pytest.mark.parametrize("query", guide_queries(GUIDE.read_text(encoding="utf-8")),
                         ids=lambda q: q.splitlines()[0][:50])
def test_each_guide_query_runs(guide_db, query):
    drv, database = guide_db
    records, summary, _ = drv.execute_query(query, database_=database)
    assert summary.query_type in ("r", "s")  # read-only: a guide never writes
    assert isinstance(records, list)


@pytest.fixture(scope="module")
def browser_server(tmp_path_factory, real_manifest):
    """A server as `gpustack neo4j start` runs one for a user: HTTP on, auth off, the real graph loaded."""
    from gpustack_compiler.neo4j.conn import Neo4jSettings
    from gpustack_compiler.neo4j.load import load

    try:
        local = LocalServer(tmp_path_factory.mktemp("browser-neo4j"), http=True, auth=False, heap="1g",
                            pagecache="128m")
    except server.Neo4jServerError as exc:
        unavailable(f"the local Neo4j could not be started: {exc}")
    try:
        load(real_manifest, Neo4jSettings(uri=local.uri), loaded_by="pytest")
        yield local.status
    finally:
        local.stop()


def test_the_style_and_guide_are_served_without_credentials(browser_server):
    import urllib.error
    import urllib.request

    base = browser_server["http_url"] + "/gpustack/"
    for name, path in (("gpustack.grass", STYLE), ("guide.html", GUIDE)):
        with urllib.request.urlopen(base + name, timeout=10) as r:
            assert r.read() == path.read_bytes()
    for name in ("style.py", "..%2Fserver.py", "GUIDE.HTML"):
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(base + name, timeout=10)
        assert exc.value.code in (400, 404)


def test_browser_connects_plays_the_guide_and_applies_the_style(browser_server, browser, real_manifest):
    rules = parse_grass(STYLE.read_text())
    root = "arch.hidden"  # the heaviest root: over 100 variables downstream
    query = f"MATCH (v:Variable) WHERE v.name IN ['training.t_step', '{root}'] RETURN v"
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(browser_server["browser_url"] + "&cmd=edit&arg=" + quote(query))
        # no login form: connected at once, and the post-connect commands ran
        first_slide = cookbook_queries(COOKBOOK.read_text(encoding="utf-8"))[0][0]
        page.get_by_text(first_slide, exact=True).first.wait_for(timeout=60000)
        page.get_by_text("node.Sys_training").first.wait_for(timeout=10000)
        page.locator(".monaco-editor").first.click()
        page.keyboard.press("Control+Enter")
        page.locator("g.node").nth(1).wait_for(timeout=30000)
        nodes = page.eval_on_selector_all("g.node", """els => els.map(e => {
            const c = e.querySelector('circle.b-outline');
            return [e.textContent.trim(), c.getAttribute('fill'), c.getAttribute('stroke'), +c.getAttribute('r')];
        })""")
    finally:
        page.close()
    by_caption = {caption: (fill, stroke, r) for caption, fill, stroke, r in nodes}
    fill, _, r = by_caption["t_step"]  # captioned by short name, coloured by its system
    assert fill.upper() == rules["node.Sys_training"]["color"]
    assert r * 2 == int(rules["node.Variable"]["diameter"][:-2])
    fill, stroke, r = by_caption["hidden"]
    assert fill.upper() == rules["node.Sys_architecture"]["color"]
    assert stroke.upper() == rules["node.Root"]["border-color"]
    assert r * 2 == int(rules["node.Debt100"]["diameter"][:-2])
    assert real_manifest["variables"][root]["is_root"]
