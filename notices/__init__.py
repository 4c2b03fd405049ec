"""The ``[reasoning]`` notices: the line, the teller, incidents and the operators' alert."""

from __future__ import annotations

__all__: list[str] = []
