"""Where protocols, the lock and results live: `experiments/` (protocols/*.yaml, protocols.lock,
results/<id>/<run_id>.json), and the repository root that scenario files are relative to."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpustack_compiler.base.errors import InputError
from gpustack_compiler.base.suggest import did_you_mean

from .lock import LockEntry, lock_status, modified_error, read_lock
from .protocol import Protocol, load_protocol

REF = re.compile(r"^(E[0-9]{3})(?:@([0-9]+))?$")


@dataclass(frozen=True)
class Workspace:
    directory: Path  # the experiments folder
    root: Path  # the repository root: scenario files and shown paths are relative to it

    @classmethod
    def at(cls, directory: str | Path, root: str | Path | None = None) -> Workspace:
        d = Path(directory)
        return cls(d, Path(root) if root is not None else d.resolve().parent)

    @property
    def protocols_dir(self) -> Path:
        return self.directory / "protocols"

    @property
    def results_dir(self) -> Path:
        return self.directory / "results"

    def shown(self, path: Path) -> str:
        """A path as printed and recorded: relative to the experiments folder's parent, POSIX style."""
        try:
            return path.resolve().relative_to(self.directory.resolve().parent).as_posix()
        except ValueError:
            return str(path)

    def files(self) -> list[Path]:
        if not self.protocols_dir.is_dir():
            return []
        return sorted(p for p in self.protocols_dir.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())

    def load_all(self, units=None) -> list[Protocol]:
        protocols = [load_protocol(p, units, self.shown(p), self.root) for p in self.files()]
        seen: dict[str, str] = {}
        for p in protocols:
            if p.key in seen:
                raise InputError(f"{p.path}:1: id: {p.spec.id} version {p.spec.version} is also in {seen[p.key]}")
            seen[p.key] = p.path
        return protocols

    def load(self, ref: str, units=None) -> Protocol:
        """`E001` (its highest version on disk) or `E001@2`."""
        m = REF.match(ref.strip())
        if not m:
            raise InputError(f"protocol {ref!r}: expected an id like E001 or E001@2")
        pid, version = m.group(1), m.group(2)
        found = [p for p in self.load_all(units) if p.spec.id == pid]
        if version is not None:
            found = [p for p in found if p.spec.version == int(version)]
        if not found:
            known = sorted({p.stem for p in self.files()})
            raise InputError(f"protocol {ref}: not found in {self.shown(self.protocols_dir)}",
                             did_you_mean(ref, known) or (f"known: {', '.join(known)}" if known else None))
        return max(found, key=lambda p: p.spec.version)

    def lock(self) -> dict[str, LockEntry]:
        return read_lock(self.directory)

    def require_frozen(self, protocol: Protocol) -> None:
        """Refuse a protocol that is not frozen, or whose content differs from its frozen copy."""
        status, fields = lock_status(protocol, self.lock())
        if status == "unfrozen":
            raise InputError(f"{protocol.path}: {protocol.spec.id} version {protocol.spec.version} is not frozen",
                             f"gpustack experiment freeze {protocol.spec.id}")
        if status == "modified":
            raise modified_error(protocol, fields)
