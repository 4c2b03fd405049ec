"""Must FAIL ``mypy --strict``: a misspelt attribute of a ``CompileResult`` is a type error.

``.ci/run`` checks that mypy rejects this file and names the misspelling, proving the facade is
typed (a ``compile`` returning ``Any`` would let ``reqest`` through).
"""

from __future__ import annotations

from context_manager import ContextManager, Head, MemoryStore

cm = ContextManager.open(MemoryStore())
print(cm.compile(Head(model="claude-opus-5-5")).reqest)
