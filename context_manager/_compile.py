"""Placeholder: the compiler lands in the next commit."""

from __future__ import annotations

from typing import Any


class Compiler:
    def __init__(self, manager: Any) -> None:
        self.manager = manager

    def forget(self, key: str) -> None:
        pass

    def invalidate(self, key: str) -> None:
        pass
