"""The `gpustack` command line: the compiler's commands plus the engine's, and the one place where
exceptions become exit codes."""

from __future__ import annotations

import sys

import typer

from gpustack_compiler.cli import app
from gpustack_compiler.errors import EXIT_INFRA, GpustackError

from . import cmd_calibration, cmd_resolve, cmd_run, cmd_scenario  # noqa: F401  (register their commands)
from . import cmd_simulate  # noqa: F401  (registers `gpustack simulate`)

# The click typer parses with: click itself before typer 0.22, a vendored copy since (click is then not
# installed at all), found through the module of typer's own usage-error class.
_click = sys.modules[typer.BadParameter.__module__]
_EXITS = (getattr(_click, "Exit", typer.Exit), typer.Exit)
_ABORTS = (getattr(_click, "Abort", typer.Abort), typer.Abort)


def main() -> None:
    try:
        code = app(standalone_mode=False, prog_name="gpustack")
    except GpustackError as exc:
        sys.stderr.write(f"Error: {exc.message}" + (f" (hint: {exc.hint})" if exc.hint else "") + "\n")
        sys.exit(exc.exit_code)
    except _EXITS as exc:
        sys.exit(exc.exit_code)
    except _ABORTS:
        sys.stderr.write("Aborted.\n")
        sys.exit(130)
    except _click.ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (hint: {ctx.command_path} --help)" if ctx is not None else ""
        sys.stderr.write(f"Error: {exc.format_message()}{hint}\n")
        sys.exit(exc.exit_code)
    except OSError as exc:
        sys.stderr.write(f"Error: {exc.strerror or exc} ({getattr(exc, 'filename', '') or ''})\n")
        sys.exit(EXIT_INFRA)
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["app", "main", "typer"]
