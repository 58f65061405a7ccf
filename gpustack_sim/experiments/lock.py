"""The lock file `experiments/protocols.lock`: for every frozen protocol version, the SHA-256 of its
canonical JSON and a canonical copy, so a protocol that no longer matches can name the fields that
differ. Freezing is append-only: a frozen id+version never changes; a change is a new version."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpustack_compiler.base.errors import InputError

from .protocol import Protocol, canonical_json, sha256_of

LOCK_NAME = "protocols.lock"
LOCK_FORMAT = 1


@dataclass(frozen=True)
class LockEntry:
    id: str
    version: int
    sha256: str
    file: str
    canonical: dict

    def to_dict(self) -> dict:
        return {"id": self.id, "version": self.version, "sha256": self.sha256, "file": self.file,
                "canonical": self.canonical}


@dataclass(frozen=True)
class FreezeResult:
    key: str
    sha256: str
    already_frozen: bool
    lock: str

    def to_dict(self) -> dict:
        return {"protocol": self.key, "sha256": self.sha256, "already_frozen": self.already_frozen,
                "lock": self.lock}


def read_lock(directory: Path) -> dict[str, LockEntry]:
    path = directory / LOCK_NAME
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != LOCK_FORMAT:
            raise ValueError(f"format {data.get('format')!r}")
        out = {}
        for key, e in data["protocols"].items():
            entry = LockEntry(e["id"], e["version"], e["sha256"], e["file"], e["canonical"])
            if sha256_of(entry.canonical) != entry.sha256 or key != f"{entry.id}@{entry.version}":
                raise ValueError(f"entry {key} does not match its own canonical copy")
            out[key] = entry
        return out
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{path}: unreadable lock file ({exc})", "restore it from version control") from None


def write_lock(directory: Path, entries: dict[str, LockEntry]) -> None:
    from gpustack_compiler.base.atomic import write_text

    data = {"format": LOCK_FORMAT, "protocols": {k: entries[k].to_dict() for k in sorted(entries)}}
    write_text(directory / LOCK_NAME, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def differing_fields(old, new, path: str = "") -> list[str]:
    """Field paths where two canonical protocols differ; list items with an id or name are keyed by it."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            sub = f"{path}.{key}" if path else key
            if key not in old or key not in new:
                out.append(sub)
            else:
                out += differing_fields(old[key], new[key], sub)
        return out
    if isinstance(old, list) and isinstance(new, list):
        ko, kn = _keyed(old), _keyed(new)
        if ko is not None and kn is not None:
            return [d for k in sorted(set(ko) | set(kn))
                    for d in ([f"{path}[{k}]"] if k not in ko or k not in kn else
                              differing_fields(ko[k], kn[k], f"{path}[{k}]"))]
        if len(old) != len(new):
            return [path]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differing_fields(a, b, f"{path}[{i}]")]
    return [] if canonical_json(old) == canonical_json(new) else [path]


def _keyed(items: list) -> dict | None:
    for field in ("id", "name", "dimension"):
        if items and all(isinstance(x, dict) and isinstance(x.get(field), str) for x in items):
            keys = [x[field] for x in items]
            if len(set(keys)) == len(keys):
                return dict(zip(keys, items))
    return None


def lock_status(protocol: Protocol, entries: dict[str, LockEntry]) -> tuple[str, list[str]]:
    """('frozen' | 'unfrozen' | 'modified', differing fields)."""
    entry = entries.get(protocol.key)
    if entry is None:
        return "unfrozen", []
    if entry.sha256 == protocol.sha256:
        return "frozen", []
    return "modified", differing_fields(entry.canonical, protocol.data)


def modified_error(protocol: Protocol, fields: list[str]) -> InputError:
    shown = ", ".join(fields[:8]) + (f" and {len(fields) - 8} more" if len(fields) > 8 else "")
    return InputError(f"{protocol.path}: {protocol.spec.id} version {protocol.spec.version} differs from its frozen "
                      f"copy in {shown}",
                      "a frozen protocol is never edited: restore it, or raise `version` (with a revision_reason) "
                      "and freeze the new version")


def freeze(protocol: Protocol, directory: Path, file: str) -> FreezeResult:
    """Write the protocol's hash and canonical copy to the lock; refuse to change a frozen version."""
    if protocol.thresholds is None:
        raise InputError(f"{protocol.path}: a protocol is frozen only after its unit checks")
    entries = read_lock(directory)
    status, fields = lock_status(protocol, entries)
    if status == "modified":
        raise modified_error(protocol, fields)
    lock = str(Path(directory.name) / LOCK_NAME)
    if status == "frozen":
        return FreezeResult(protocol.key, protocol.sha256, True, lock)
    previous = [e for e in entries.values() if e.id == protocol.spec.id and e.version >= protocol.spec.version]
    if previous:
        raise InputError(f"{protocol.path}: {protocol.spec.id} version {previous[0].version} is already frozen; "
                         f"a new version must be higher than every frozen one")
    entries[protocol.key] = LockEntry(protocol.spec.id, protocol.spec.version, protocol.sha256, file, protocol.data)
    write_lock(directory, entries)
    return FreezeResult(protocol.key, protocol.sha256, False, lock)
