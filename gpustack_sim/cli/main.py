"""The `gpustack` command line: every command module registered on the root app, and the one place
where exceptions become exit codes (0 ok, 1 findings, 2 usage, 3 infrastructure)."""

from __future__ import annotations

import sys

import typer

from gpustack_compiler.base.errors import (
    CatalogError,
    FindingError,
    GpustackError,
    InfrastructureError,
    InputError,
    ViolationError,
)

# Importing a command module registers its commands on the root app.
from . import (  # noqa: F401
    calibration,
    catalog,
    diff,
    estimate,
    experiment,
    graph,
    learn,
    neo4j,
    observations,
    observatory,
    presets,
    resolve,
    simulate,
    sweep,
)
from .app import EXIT_FINDINGS, EXIT_INFRA, EXIT_OK, EXIT_USAGE, app, err

PATH_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError)
EXIT_CODES = ((CatalogError, EXIT_FINDINGS), (ViolationError, EXIT_FINDINGS), (FindingError, EXIT_FINDINGS),
              (InputError, EXIT_USAGE), (InfrastructureError, EXIT_INFRA))

# The click typer parses with: click itself before typer 0.22, a vendored copy since (click is then not
# installed at all), found through the module of typer's own usage-error class.
_click = sys.modules[typer.BadParameter.__module__]
_EXITS = (getattr(_click, "Exit", typer.Exit), typer.Exit)
_ABORTS = (getattr(_click, "Abort", typer.Abort), typer.Abort)


def exit_code(exc: GpustackError) -> int:
    return next((code for kind, code in EXIT_CODES if isinstance(exc, kind)), EXIT_FINDINGS)


def main() -> None:
    try:
        code = app(standalone_mode=False, prog_name="gpustack")
    except GpustackError as exc:
        findings = getattr(exc, "findings", None)
        if findings is not None:
            errors = sorted(findings.errors)
            for f in errors[:20]:
                err(f.as_text())
            if len(errors) > 20:
                err(f"({len(errors) - 20} more not shown)")
        err(f"Error: {exc}")
        sys.exit(exit_code(exc))
    except _EXITS as exc:
        sys.exit(exc.exit_code)
    except _ABORTS:
        err("Aborted.")
        sys.exit(130)
    except _click.ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (hint: {ctx.command_path} --help)" if ctx is not None else ""
        err(f"Error: {exc.format_message()}{hint}")
        sys.exit(exc.exit_code)
    except OSError as exc:
        # A path the user gave that is not there is their input; anything else (a full disk, a refused
        # connection) is the machine's.
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        err(f"Error: {exc.strerror or exc}{where}")
        sys.exit(EXIT_USAGE if isinstance(exc, PATH_ERRORS) else EXIT_INFRA)
    sys.exit(code if isinstance(code, int) else EXIT_OK)
