"""One panel per protocol: the arms it replays and how its metrics are computed (see base.py)."""

from __future__ import annotations

from .base import Panel
from .e001 import E001
from .e002 import E002
from .e003 import E003
from .e004 import E004
from .e005 import E005
from .e006 import E006

PANELS: dict[str, Panel] = {p.protocol_id: p for p in (E001(), E002(), E003(), E004(), E005(), E006())}

__all__ = ["PANELS", "Panel"]
