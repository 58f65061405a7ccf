"""The research record kept apart from the product: results/<id>/ holds the latest artifact of each protocol
version and stage, and `history.jsonl` beside it one line per artifact it replaced (run id, hashes, code,
catalog and conclusion), which the results log lists under the latest one."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from gpustack_compiler.base.atomic import write_text

from .results import Artifact

HISTORY = "history.jsonl"


@dataclass(frozen=True)
class Superseded:
    run_id: str
    version: int
    stage: str
    artifact_sha256: str
    protocol_sha256: str
    code_version: str
    catalog_hash: str
    conclusion: str

    @classmethod
    def of(cls, a: Artifact) -> Superseded:
        return cls(a.run_id, a.protocol.version, a.stage, a.artifact_sha256, a.protocol.sha256, a.code_version,
                   a.catalog_hash, a.conclusion)


def read_history(folder: Path) -> list[Superseded]:
    path = folder / HISTORY
    if not path.is_file():
        return []
    return [Superseded(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]


def supersede(latest: Artifact, path: Path, load) -> list[Superseded]:
    """Move every other artifact of `latest`'s protocol version and stage in `path`'s folder into the history
    (written first, so a kill in between leaves an artifact listed twice, never one lost); `load` reads one."""
    folder = path.parent
    replaced = []
    for other in sorted(folder.glob("*.json")):
        if other == path:
            continue
        a = load(other)
        if (a.protocol.version, a.stage) == (latest.protocol.version, latest.stage):
            replaced.append((other, Superseded.of(a)))
    if replaced:
        # a run made again is the latest, not an earlier run as well
        known = [s for s in read_history(folder) if s.run_id != latest.run_id]
        lines = [*known, *(s for _, s in replaced if s not in known)]
        write_text(folder / HISTORY, "".join(json.dumps(asdict(s), sort_keys=True) + "\n" for s in lines))
        for other, _ in replaced:
            other.unlink()
    return [s for _, s in replaced]


__all__ = ["HISTORY", "Superseded", "read_history", "supersede"]
