"""Neo4j Browser files: the GraSS style parses and styles the graph's labels; the guide is generated from
the current cookbook and every one of its runnable queries runs against the real test server; `neo4j
start` gives a Browser address that connects at once when auth is off."""

from __future__ import annotations

import re

import pytest

from gpustack_compiler.neo4j import server
from gpustack_compiler.neo4j.browser.guide import COOKBOOK, GUIDE, STYLE, cookbook_queries, guide_html, guide_queries

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


def test_style_parses_and_sets_the_labels_apart():
    rules = parse_grass(STYLE.read_text())
    assert {"node", "relationship", "node.Variable", "node.Root", "node.Constant", "node.Relation"} <= set(rules)
    for sel, decls in rules.items():
        for key, value in decls.items():
            if key.endswith("color") or key == "color":
                assert re.fullmatch(r"#[0-9A-Fa-f]{6}", value), (sel, key, value)
            if key in ("diameter", "shaft-width", "font-size", "border-width", "padding"):
                assert re.fullmatch(r"\d+px", value), (sel, key, value)
            if key == "caption":
                assert re.fullmatch(r'"(\{\w+\}|<type>|<id>)"', value), (sel, value)
    # Roots (modelling debt) and constants are set apart from other variables.
    assert rules["node.Root"]["color"] != rules["node.Variable"]["color"] != rules["node.Constant"]["color"]
    assert int(rules["node.Root"]["diameter"][:-2]) > int(rules["node.Variable"]["diameter"][:-2])


def test_guide_is_the_current_cookbook():
    markdown = COOKBOOK.read_text(encoding="utf-8")
    assert GUIDE.read_text(encoding="utf-8") == guide_html(markdown), \
        "stale: python -m gpustack_compiler.neo4j.browser.guide"
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
