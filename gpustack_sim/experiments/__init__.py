"""Preregistered experiments: protocols (checked, frozen by content hash), the power audit, runs on the
virtual datacenter that write content-addressed artifacts, and the results log. docs/experiments.md.

    from gpustack_sim import Engine
    from gpustack_sim.experiments import Workspace, run_protocol
    ws = Workspace.at("experiments")
    result = run_protocol("E001", workspace=ws, engine_factory=lambda: Engine.open("catalog"))
    result.artifact.conclusion
"""

from __future__ import annotations

# Names resolve on first use, so that `gpustack check` (which reads the protocols) loads neither the
# runner with the datacenter nor the audit.
_HOMES = {"Audit": "power_audit", "GateAudit": "power_audit", "audit": "power_audit", "FreezeResult": "lock", "freeze": "lock",
          "Protocol": "protocol", "ProtocolFile": "protocol", "load_protocol": "protocol",
          "Artifact": "results", "RunResult": "results", "Workspace": "workspace",
          "ProtocolStatus": "status", "check": "status", "findings": "status", "freeze_protocol": "status",
          "conclude": "runner", "load_artifact": "runner", "run_protocol": "runner"}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{home}", __name__), name)
