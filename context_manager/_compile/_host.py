"""``CompileHost``: what the compiler reads from the facade that owns it (no import upward)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from context_manager._model._content import Block
from context_manager._model._editing import ContextEditing
from context_manager._model._head import ThinkingBinding
from context_manager._model._results import CompileResult
from context_manager._reasoning._capture import ReasoningCapture
from context_manager._store._protocol import Lineage, Store

from ._caching import Caching
from ._strategies import Strategy


class CompileHost(Protocol):
    """What the compiler reads from the facade that owns it (``ContextManager`` is one).

    The compiler holds no reference upward: it gets the store, the namespace, the binding, the
    strategy, the estimator and the sidecar hooks through this, and returns each strip in its
    ``CompileResult``; telling observers is the facade's job.
    """

    store: Store
    namespace: str
    binding: ThinkingBinding
    strategy: Strategy
    estimator: Callable[[Any], int]
    caching: Caching
    editing: ContextEditing | None
    reasoning: ReasoningCapture | None
    token: str

    def current_branch_key(self) -> str: ...

    def lineage(self, key: str | None = None) -> Lineage: ...

    def resolve_reasoning(self, block: Block) -> Block | None: ...

    def capture_reasoning(
        self, blocks: tuple[Block, ...], result: CompileResult
    ) -> tuple[Block, ...]: ...
