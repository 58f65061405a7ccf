"""`gpustack diff`: what the work tree's catalog changes compared with a git ref (the pull-request view)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from .app import JsonOpt, app, out, settings

if TYPE_CHECKING:
    from ..analyses.diff import CatalogDiff, Change

FIELDS_SHOWN = 3  # per changed entry, in text and markdown


class Format(str, Enum):
    text = "text"
    markdown = "markdown"
    github = "github"
    json = "json"


@app.command("diff")
def diff_cmd(ctx: typer.Context,
             base: str = typer.Option("HEAD", "--base", help="Git ref to compare the work tree with (a branch, "
                                      "tag or commit; in CI the pull request's base)."),
             runs: Path = typer.Option(None, "--runs", help="Run files folder (default: runs/ beside the catalog)."),
             fmt: Format = typer.Option(Format.text, "--format", help="text, markdown (a job summary), github "
                                        "(annotations on the changed lines) or json."),
             as_json: bool = JsonOpt) -> None:
    """Entries added, removed and changed; the headline targets' cones reached; how every run's estimate moves."""
    from ..api import Engine

    result = Engine.diff(settings(ctx).catalog, base, runs)
    if as_json or fmt is Format.json:
        out(result.to_dict(), "", True)
        return
    render = {Format.text: text, Format.markdown: markdown, Format.github: github}[fmt]
    out(None, render(result), False)


SHOWN_CHARS = 80  # of one value, around where it changes


def _fields(c: Change) -> str:
    items = [item for k, (b, a) in sorted(c.fields.items()) for item in _changed(k, b, a)]
    shown = [f"{k}: {_pair(b, a)}" for k, b, a in items[:FIELDS_SHOWN]]
    more = f" (+{len(items) - FIELDS_SHOWN} more)" if len(items) > FIELDS_SHOWN else ""
    return "; ".join(shown) + more


def _changed(key: str, before, after) -> list[tuple[str, object, object]]:
    """The leaves that differ, by dotted key: a changed mapping shows what changed in it, not its first
    characters (which are often the same on both sides)."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [item for k in sorted(set(before) | set(after), key=str) if before.get(k) != after.get(k)
                for item in _changed(f"{key}.{k}", before.get(k), after.get(k))]
    return [(key, before, after)]


def _pair(before, after) -> str:
    """`before -> after`, each cut to SHOWN_CHARS around the first character where they differ."""
    b, a = (v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str) for v in (before, after))
    first = next((i for i, (x, y) in enumerate(zip(b, a)) if x != y), min(len(a), len(b)))
    start = max(0, first - 20) if max(len(a), len(b)) > SHOWN_CHARS else 0

    def cut(text: str) -> str:
        part = text[start:start + SHOWN_CHARS]
        return ("..." if start else "") + part + ("..." if start + SHOWN_CHARS < len(text) else "")
    return f"{cut(b)} -> {cut(a)}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.3g}%"


def text(d: CatalogDiff) -> str:
    lines = [f"catalog diff against {d.base} ({d.commit[:12]}): {len(d.changes)} entr{'y' if len(d.changes) == 1 else 'ies'} "
             "changed"]
    for c in d.changes:
        where = f"  [{c.file}:{c.line}]" if c.file else ""
        lines.append(f"  {c.status:<8} {c.kind[:-1]:<9} {c.name}{where}")
        if c.fields:
            lines.append(f"           {_fields(c)}")
    lines.append(f"blast radius: {d.reached} variable(s) reached")
    lines += [f"  {t}: {n} variable(s) of its cone" for t, n in d.blast.items() if n]
    untouched = [t for t, n in d.blast.items() if not n]
    if untouched:
        lines.append(f"  unchanged cones: {', '.join(untouched)}")
    for r in d.runs:
        lines.append(f"{r.run}:")
        if r.error_before != r.error_after:
            lines.append(f"  error before: {r.error_before or '-'}; after: {r.error_after or '-'}")
        moved = r.moved
        if not moved:
            lines.append("  no figure moved")
        for f in moved:
            lines.append(f"  {f.label:<44} {_num(f.before)} -> {_num(f.after)} {f.units}  ({_pct(f.percent)})")
    return "\n".join(lines)


def markdown(d: CatalogDiff) -> str:
    lines = [f"## Catalog diff against `{d.base}` (`{d.commit[:12]}`)", ""]
    if not d.changes:
        lines.append("No catalog entry changed.")
    else:
        lines += ["| status | kind | entry | what changed |", "| --- | --- | --- | --- |"]
        lines += [f"| {c.status} | {c.kind[:-1]} | `{c.name}` | {_cell(_fields(c)) or '-'} |" for c in d.changes]
    lines += ["", f"### Blast radius: {d.reached} variable(s) reached", "",
              "| headline target | variables of its cone reached |", "| --- | --- |"]
    lines += [f"| `{t}` | {n} |" for t, n in d.blast.items()]
    for r in d.runs:
        lines += ["", f"### `{r.run}`", ""]
        if r.error_before != r.error_after:
            lines += [f"Error before: {r.error_before or '-'}; after: {r.error_after or '-'}", ""]
        moved = r.moved
        if not moved:
            lines.append("No figure moved.")
            continue
        lines += ["| figure | before | after | change |", "| --- | --- | --- | --- |"]
        lines += [f"| {f.label} | {_num(f.before)} {f.units} | {_num(f.after)} {f.units} | {_pct(f.percent)} |"
                  for f in moved]
    return "\n".join(lines)


def github(d: CatalogDiff) -> str:
    """One workflow annotation per changed entry, on its line of the catalog (the new file's, or the old
    one's for a removal), then a notice per run file with the figures that moved most."""
    lines = []
    for c in d.changes:
        where = f"file={c.file},line={c.line}," if c.file else ""
        detail = f": {_fields(c)}" if c.fields else ""
        lines.append(f"::notice {where}title=catalog {c.status}::{c.kind[:-1]} {c.name} {c.status}{detail}")
    for r in d.runs:
        moved = ", ".join(f"{f.label} {_pct(f.percent)}" for f in r.moved[:5])
        if moved:
            lines.append(f"::notice title={r.run}::{moved}")
    return "\n".join(lines)
