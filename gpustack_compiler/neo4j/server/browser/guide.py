"""Neo4j Browser files: a GraSS style (`gpustack.grass`) and a guide whose slides are the Cypher cookbook's
queries (`guide.html`, generated from docs/cypher.md by `python -m gpustack_compiler.neo4j.server.browser.guide`),
each runnable with one click (Browser's `runnable` code blocks)."""

from __future__ import annotations

import html
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
GUIDE = HERE / "guide.html"
STYLE = HERE / "gpustack.grass"
COOKBOOK = HERE.parents[3] / "docs" / "cypher.md"


def cookbook_queries(markdown: str) -> list[tuple[str, str, str]]:
    """(section heading, the paragraph just before the query, the query) for every ```cypher block."""
    out, heading, text = [], "", ""
    for part in re.split(r"(```cypher\n.*?```)", markdown, flags=re.S):
        if part.startswith("```cypher"):
            out.append((heading, text, part[len("```cypher\n"):-3].strip()))
            continue
        paragraphs = []
        for para in re.split(r"\n\s*\n", part):
            lines = [ln.strip() for ln in para.strip().splitlines()]
            headings = [ln for ln in lines if ln.startswith("#")]
            if headings:
                heading = headings[-1].lstrip("#").strip()
            lines = [ln for ln in lines if ln and not ln.startswith("#")]
            if lines:
                paragraphs.append(" ".join(lines))
        text = paragraphs[-1] if paragraphs else ""
    return out


def guide_html(markdown: str) -> str:
    """A Browser guide: one slide per cookbook query, the text before it, the query runnable."""
    slides = []
    for heading, text, query in cookbook_queries(markdown):
        plain = re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text, quote=False))
        slides.append(
            '<slide class="row-fluid">\n  <div class="col-sm-12">\n'
            f"    <h3>{html.escape(heading)}</h3>\n    <p>{plain}</p>\n"
            f'    <pre class="pre-scrollable code runnable">{html.escape(query, quote=False)}</pre>\n'
            "  </div>\n</slide>")
    return ('<article class="guide">\n<carousel class="deck container-fluid">\n'
            + "\n".join(slides) + "\n</carousel>\n</article>\n")


def guide_queries(guide: str) -> list[str]:
    return [html.unescape(q).strip() for q in re.findall(r'<pre class="[^"]*runnable[^"]*">(.*?)</pre>', guide, re.S)]


if __name__ == "__main__":
    GUIDE.write_text(guide_html(COOKBOOK.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {GUIDE}")
