"""``centralmcp-batch demo``: a real MCP client against the demo router, started as a subprocess.

``script`` is what the demo sends and what each call must answer, ``client`` runs it over a real
session, ``render`` turns the answers into plain-text tables and a progress line.
"""

from __future__ import annotations

from .client import run

__all__ = ["run"]
