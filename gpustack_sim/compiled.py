"""The compiled catalog the engine reads: where the catalog is, and its manifest (checked and compiled,
cached next to the manifest by content hash).

Apart from api.py because it imports no sympy: commands that only read the graph (`show`, `cone`,
`stats`, `check`) start without the engine's heavy imports.
"""

from __future__ import annotations

from pathlib import Path

from gpustack_compiler.base.errors import CatalogError, InputError
from gpustack_compiler.build import pipeline

REPO_CATALOG = Path(__file__).resolve().parent.parent / "catalog"


def default_catalog() -> Path:
    """./catalog when there is one, else the catalog shipped beside the package."""
    here = Path("catalog")
    return here if here.is_dir() else REPO_CATALOG


def compile_catalog(catalog: str | Path | None = None, build_dir: str | Path | None = "build",
                    write: bool = False) -> pipeline.Result:
    """Check and compile a catalog (cached next to the manifest by content hash); CatalogError
    carrying every finding when it has errors."""
    root = Path(catalog) if catalog is not None else default_catalog()
    if not root.is_dir():
        raise InputError(f"catalog directory {root} not found", "pass the catalog directory")
    result = pipeline.run(root, Path(build_dir) if build_dir is not None else None, write_manifest=write)
    if result.manifest is None:
        errors = len(result.findings.errors)
        raise CatalogError(f"the catalog has {errors} error(s)", "run `gpustack check` for every finding",
                           findings=result.findings)
    return result
