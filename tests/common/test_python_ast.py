"""Parsing from several threads at once, as the reward grader and the event loop do."""

from __future__ import annotations

import ast
import re
import threading
import time
from pathlib import Path

from etude.common import python_ast

ROOT = Path(__file__).resolve().parents[2]
SOURCE = (ROOT / "services" / "reward" / "canaries.py").read_text()


class _CyclicWithFinalizer:
    """Garbage only the cycle collector frees; its finalizer runs Python code, which is where
    the interpreter may switch threads in the middle of another thread's parse."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


def test_parses_on_many_threads_with_finalizers_running_never_fail():
    expected = ast.dump(ast.parse(SOURCE))
    errors: list[BaseException] = []
    wrong: list[int] = []

    def work() -> None:
        for _ in range(40):
            try:
                if ast.dump(python_ast.parse(SOURCE)) != expected:
                    wrong.append(1)
            except BaseException as error:  # any error is the failure asserted
                errors.append(error)
            for _ in range(50):
                _CyclicWithFinalizer()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert wrong == []


def test_services_parse_only_through_the_lock():
    direct = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "services").rglob("*.py"))
        if path.name != "python_ast.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bast\.parse\(", line)
    ]
    assert direct == [], "parse with etude.common.python_ast.parse instead"
