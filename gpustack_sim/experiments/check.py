"""`gpustack check` also checks the preregistered protocols in experiments/ beside the catalog."""

from __future__ import annotations

from pathlib import Path

from gpustack_compiler.findings import Findings, Level


def protocol_findings(catalog: Path, build: Path, catalog_result) -> Findings:
    """Findings for every protocol; the unit checks need the catalog's unit system, so with catalog errors
    the protocols are checked without them (and a warning says so)."""
    from . import findings
    from .workspace import Workspace

    ws = Workspace.at(Path(catalog).resolve().parent / "experiments")
    if not ws.protocols_dir.is_dir():
        return Findings()
    units = None
    if not catalog_result.findings.errors:
        from gpustack_compiler import pipeline
        from gpustack_compiler.units import UnitSystem

        compiled = pipeline.run(Path(catalog), build, write_manifest=False)
        if compiled.manifest is not None:
            units = UnitSystem.from_manifest(compiled.manifest["units"])
    out = findings(ws, units)
    if units is None:
        out.add(ws.shown(ws.protocols_dir), 1, "experiment.units-unchecked",
                "protocol units not checked: the catalog has errors", level=Level.WARNING)
    return out
