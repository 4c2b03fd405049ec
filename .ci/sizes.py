"""House size rules (STYLE 9, issue 27): no function over 80 lines, no module over 600 lines.

Usage: python .ci/sizes.py context_manager notices   (exit 1, listing each offender, if any)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600


def offenders(roots: list[str]) -> list[str]:
    found: list[str] = []
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            lines = len(text.splitlines())
            if lines > MAX_MODULE_LINES:
                found.append(f"{path}: {lines} lines (module limit {MAX_MODULE_LINES})")
            for node in ast.walk(ast.parse(text, filename=str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        found.append(
                            f"{path}:{node.lineno}: {node.name} is {length} lines "
                            f"(function limit {MAX_FUNCTION_LINES})"
                        )
    return found


if __name__ == "__main__":
    bad = offenders(sys.argv[1:] or ["context_manager", "notices"])
    for line in bad:
        print(line)
    sys.exit(1 if bad else 0)
