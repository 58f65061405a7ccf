"""User documents in YAML (run files, sites files, protocols, observations): read safely into a mapping
that remembers its lines, then validated against a pydantic model. Every problem is one InputError
naming the file, the line and the field."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from .errors import InputError
from .limits import MAX_DOCUMENT_BYTES, read_text
from .yaml_lines import LinedDict, YamlError, line_at, load

M = TypeVar("M", bound=BaseModel)


def field_path(loc: tuple) -> str:
    """A pydantic location as a field path: `layout.tp`, `falsifiers[2].metric`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def read_mapping(path: Path, what: str, shown: str | None = None) -> LinedDict:
    """The YAML mapping in `path` (`what` names the kind of document, `shown` the path printed)."""
    where = shown or str(path)
    text = read_text(path, MAX_DOCUMENT_BYTES, what, where)
    try:
        data, duplicates = load(text)
    except YamlError as exc:
        raise InputError(f"{where}:{exc.line}: {exc.message}") from None
    if duplicates:
        key, line = duplicates[0]
        raise InputError(f"{where}:{line}: {key}: key given twice")
    if not isinstance(data, dict):
        raise InputError(f"{where}:1: a {what} is a YAML mapping")
    return data


def validate(model: type[M], data: dict, where: str) -> M:
    """`data` as `model`; the first problem as `where:line: field: message` (no line when `data` has none)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        loc = tuple(err["loc"])
        line = f":{line_at(data, loc)}" if isinstance(data, LinedDict) else ""
        raise InputError(f"{where}{line}: {field_path(loc)}: {err['msg']}") from None
