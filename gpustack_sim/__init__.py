"""gpustack's engine: resolve, estimate, sweep, sample, calibrate and validate training runs against
the compiled equation catalog. `from gpustack_sim import Engine`; see docs/api.md."""

from __future__ import annotations


def __getattr__(name: str):
    # Imported on first use: `import gpustack_sim` stays cheap for commands that never resolve.
    if name == "Engine":
        from .api import Engine

        return Engine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Engine"]
