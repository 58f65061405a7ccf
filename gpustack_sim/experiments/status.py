"""What `gpustack experiment check` and `gpustack check` report about the protocols: each one's lock
status, and the protocols' errors as catalog findings."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpustack_compiler.base.errors import InputError

from .lock import FreezeResult, freeze, lock_status
from .protocol import load_protocol
from .workspace import Workspace


@dataclass(frozen=True)
class ProtocolStatus:
    key: str
    path: str
    title: str
    sha256: str
    lock: str  # frozen | unfrozen | modified
    differing_fields: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"protocol": self.key, "path": self.path, "title": self.title, "sha256": self.sha256,
                "lock": self.lock, "differing_fields": list(self.differing_fields)}


def check(ws: Workspace, units) -> list[ProtocolStatus]:
    """Check every protocol (the first bad one raises a one-line InputError) and its lock status."""
    entries = ws.lock()
    out = []
    for p in ws.load_all(units):
        status, fields = lock_status(p, entries)
        out.append(ProtocolStatus(p.key, p.path, p.spec.title, p.sha256, status, tuple(fields)))
    return out


def freeze_protocol(ws: Workspace, ref: str, units) -> FreezeResult:
    p = ws.load(ref, units)
    return freeze(p, ws.directory, p.path)


_WHERE = re.compile(r"^(?P<file>[^:]+):(?P<line>[0-9]+): (?P<message>.*)$")


def findings(ws: Workspace, units):
    """The protocols' errors as catalog findings (for `gpustack check`): a bad protocol, a frozen protocol
    that was edited. Nothing when there is no experiments folder."""
    from gpustack_compiler.base.findings import Findings

    out = Findings()
    if not ws.protocols_dir.is_dir():
        return out
    try:
        entries = ws.lock()
    except InputError as exc:
        out.add(ws.shown(ws.directory / "protocols.lock"), 1, "experiment.lock", str(exc))
        return out
    for path in ws.files():
        shown = ws.shown(path)
        try:
            p = load_protocol(path, units, shown, ws.root)
        except InputError as exc:
            m = _WHERE.match(str(exc))
            if m:
                out.add(m["file"], int(m["line"]), "experiment.protocol", m["message"])
            else:
                out.add(shown, 1, "experiment.protocol", str(exc))
            continue
        status, fields = lock_status(p, entries)
        if status == "modified":
            out.add(shown, 1, "experiment.frozen-edited",
                    f"{p.spec.id} version {p.spec.version} differs from its frozen copy in {', '.join(fields)}; "
                    "restore it or raise `version`")
    return out
