"""Python source to `ast` trees, safe to call from several threads at once.

CPython 3.11 counts recursion with one counter per interpreter while it turns its syntax tree
into `ast` objects. A thread switch in the middle (a garbage collection that runs a `__del__`
is enough) lets another thread's parse move the same counter, and `ast.parse` then fails with
`SystemError: AST constructor recursion depth mismatch` on perfectly good source. Grading
parses hidden tests on worker threads while the event loop parses for hints and tasks, so
every parse of the services goes through one lock (re-entrant: a finalizer that runs during
a parse may parse too).
"""

from __future__ import annotations

import ast
import threading

_conversion = threading.RLock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """`ast.parse`, serialised with every other parse of this process."""
    with _conversion:
        return ast.parse(source, filename=filename, mode=mode)
