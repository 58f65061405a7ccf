"""The `gpustack` command line: the compiler's commands plus the engine's, and the one place where
exceptions become exit codes."""

from __future__ import annotations

import sys

import click
import typer

from gpustack_compiler.cli import app
from gpustack_compiler.errors import EXIT_INFRA, GpustackError

from . import cmd_calibration, cmd_resolve, cmd_run, cmd_scenario  # noqa: F401  (register their commands)


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except GpustackError as exc:
        sys.stderr.write(f"Error: {exc.message}" + (f" (hint: {exc.hint})" if exc.hint else "") + "\n")
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.stderr.write("Aborted.\n")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except OSError as exc:
        sys.stderr.write(f"Error: {exc.strerror or exc} ({getattr(exc, 'filename', '') or ''})\n")
        sys.exit(EXIT_INFRA)
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["app", "main", "typer"]
