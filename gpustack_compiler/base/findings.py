"""Findings are data: every check reports through one record type, rendered in one place."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum


class Level(str, Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, order=True)
class Finding:
    file: str
    line: int
    id: str
    message: str
    level: Level = Level.ERROR
    column: int | None = None
    context: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["level"] = self.level.value
        return {k: d[k] for k in ("id", "level", "message", "file", "line", "column", "context")}

    def as_text(self) -> str:
        where = f"{self.file}:{self.line}" + (f":{self.column}" if self.column else "")
        ctx = f" [{self.context}]" if self.context else ""
        return f"{where}: {self.level.value} {self.id}: {self.message}{ctx}"

    def as_github(self) -> str:
        col = f",col={self.column}" if self.column else ""
        kind = "error" if self.level is Level.ERROR else "warning"
        msg = self.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        return f"::{kind} file={self.file},line={self.line}{col},title={self.id}::{msg}"


@dataclass
class Findings:
    """An ordered collection of findings; the exit code is decided here and nowhere else."""

    items: list[Finding] = field(default_factory=list)

    def add(self, file: str, line: int | None, id: str, message: str, *, level: Level = Level.ERROR,
            column: int | None = None, context: str | None = None) -> None:
        self.items.append(Finding(file, line or 1, id, message, level, column, context))

    def extend(self, other: Findings) -> None:
        self.items.extend(other.items)

    @classmethod
    def from_dicts(cls, rows: list[dict]) -> Findings:
        """Findings stored with `Finding.to_dict` (the caches keep them so)."""
        return cls([Finding(**{**d, "level": Level(d["level"])}) for d in rows])

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.items if f.level is Level.ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.items if f.level is Level.WARNING]

    def sorted(self) -> list[Finding]:
        return sorted(set(self.items))

    def exit_code(self, strict: bool = False) -> int:
        if self.errors or (strict and self.warnings):
            return 1
        return 0

    def render(self, fmt: str) -> str:
        items = self.sorted()
        if fmt == "json":
            return json.dumps({"findings": [f.to_dict() for f in items],
                               "errors": len(self.errors), "warnings": len(self.warnings)}, indent=2)
        if fmt == "github":
            return "\n".join(f.as_github() for f in items)
        lines = [f.as_text() for f in items]
        lines.append(f"{len(self.errors)} error(s), {len(self.warnings)} warning(s)")
        return "\n".join(lines)
