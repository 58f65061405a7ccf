"""JSON Schema for editors, generated from the pydantic models and committed under schemas/."""

from __future__ import annotations

import json
from pathlib import Path

from gpustack_compiler.language import models as m

SCHEMA_FILES: dict[str, type[m.Strict]] = {
    "system.schema.json": m.SystemFile,
    "systems.schema.json": m.SystemsFile,
    "units.schema.json": m.UnitsFile,
    "constants.schema.json": m.ConstantsFile,
    "references.schema.json": m.ReferencesFile,
    "presets.schema.json": m.PresetFile,
    **{f"{kind}.schema.json": model for kind, model in m.BINDING_FILES.values()},
}


def render() -> dict[str, str]:
    out = {}
    for filename, model in SCHEMA_FILES.items():
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                  "$id": f"gpustack/{filename}", **model.model_json_schema()}
        out[filename] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def stale(directory: Path) -> list[str]:
    """Schema files that are missing or differ from what the models generate."""
    return [name for name, text in render().items()
            if not (directory / name).exists() or (directory / name).read_text(encoding="utf-8") != text]


def write(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    changed = stale(directory)
    for name, text in render().items():
        if name in changed:
            (directory / name).write_text(text, encoding="utf-8")
    return changed
