"""What a patch may not change, and code that reaches into the test runner.

Two policies, chosen so a forged reward buys nothing:

- Test files and test infrastructure are put back as the base has them before grading
  (`is_reverted`): the hidden tests decide the reward, so a fix never needs them, and an
  edit there (a `conftest.py` hook, a config's `addopts = -p ...`, a `pytest` package
  shadow, a `.pth`, `sitecustomize.py`, planted bytecode) is discarded instead of run.
  The component `reverted_files` counts them; `touched_tests` is set.
- Non-test code the patch adds that reaches into the test runner or the interpreter's
  machinery (`runner_access`) scores 0 with `tampered`. A bug fix in library code has no
  reason to import pytest, walk frames or the garbage collector, replace builtins or
  import hooks, call `os._exit`, or run strings as code; the rare legitimate use (a
  project that is itself a plugin loader) costs one task's reward, while letting it
  through would pay the policy for forging. Only findings the patch introduces count
  (on lines it adds, or more of a kind than the base file had), so a project's own use
  of such code does not fail every fix of it. The check is AST-based and sees through
  cheap obfuscation (aliases, `getattr` with strings, `__import__`, `import_module`);
  it cannot see everything, which is why canary tests (copies of the hidden tests a
  forger cannot tell from them) judge the outcome: they are the main layer, this one
  stops the cheap attempts. Archives (a zip on `sys.path` imports code no check reads)
  and compiled modules are refused outright.
"""

from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize
import zipfile
from collections import Counter
from dataclasses import dataclass

from etude.common import python_ast

TEST_PATH = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
INFRA_NAMES = {
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
    "setup.cfg", "pyproject.toml", "sitecustomize.py", "usercustomize.py", "__pycache__",
}  # fmt: skip
# Top-level names of the runner and what it imports: a file or package of that name
# anywhere could shadow it for a test that puts its own directory on `sys.path`.
SHADOWED = {"pytest", "_pytest", "pluggy", "py", "iniconfig"}
COMPILED = (".so", ".pyd", ".dylib", ".dll")
ARCHIVES = (".zip", ".egg", ".whl", ".pyz", ".pyzw", ".jar")


def is_reverted(path: str) -> bool:
    """A test file or test infrastructure: put back as the base has it before grading."""
    parts = path.split("/")
    name = parts[-1]
    if TEST_PATH.search(path) or name in INFRA_NAMES or "__pycache__" in parts:
        return True
    if name.endswith((".pth", ".pyc", ".pyo")):
        return True
    return any(p.removesuffix(".py") in SHADOWED for p in parts)


# Modules whose import alone is runner access.
_MODULES = {
    "pytest", "_pytest", "pluggy", "py", "builtins", "__builtin__", "ctypes", "_ctypes",
    "cffi", "atexit", "runpy", "marshal", "site", "imp", "_imp", "importlib",
    "_testcapi", "_xxsubinterpreters", "_interpreters", "bdb", "pdb", "trace", "gc",
    "zipimport",
}  # fmt: skip
_ALLOWED_SUBMODULES = {"importlib.metadata", "importlib.resources"}
# Attributes that are runner access on whatever object they are read from.
_ATTRIBUTES = {
    "_getframe", "_current_frames", "_current_exceptions", "settrace", "setprofile",
    "meta_path", "path_hooks", "path_importer_cache", "get_objects", "get_referrers",
    "get_referents", "currentframe", "getouterframes", "getinnerframes", "f_back",
    "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "gi_frame", "cr_frame",
    "ag_frame", "__subclasses__", "__globals__", "__builtins__", "_exit", "addaudithook",
    "import_module", "__import__", "walk_stack", "walk_tb", "_getframemodulename",
    # A builtin function's `__self__` is the builtins module; code objects, closures,
    # loaders and base classes lead to everything else.
    "__self__", "__code__", "__closure__", "__loader__", "__spec__", "__base__",
}  # fmt: skip
# Attribute names that are modules of the runner or the interpreter's machinery: reached as
# an attribute of any other module (`logging.sys.modules`), they are an import in disguise.
_MODULE_NAMES = {
    "sys", "gc", "builtins", "__builtin__", "importlib", "ctypes", "inspect", "pytest",
    "_pytest", "pluggy", "zipimport",
}  # fmt: skip
# Attributes that are runner access only on these modules (too common a name elsewhere).
_MODULE_ATTRIBUTES = {
    "sys": {"modules", "monitoring", "path", "__dict__"},
    "inspect": {"stack", "trace", "getframeinfo", "getmembers", "__dict__"},
    "os": {"__dict__"},
    "gc": {"__dict__"},
    "types": {"CodeType", "FunctionType", "FrameType", "__dict__"},
}
_SENSITIVE_ALIASES = set(_MODULE_ATTRIBUTES) | {"builtins", "importlib", "threading"}
_CALLS = {"exec", "eval", "compile", "__import__", "breakpoint"}
_STRINGS = {"pytest", "_pytest", "pluggy", "builtins", "__builtin__", "ctypes"} | _ATTRIBUTES


@dataclass(frozen=True, slots=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _top(module: str) -> str:
    return module.split(".")[0]


def _module_flagged(module: str) -> bool:
    if module in _ALLOWED_SUBMODULES or any(
        module.startswith(a + ".") for a in _ALLOWED_SUBMODULES
    ):
        return False
    return _top(module) in _MODULES


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: list[tuple[int, int, str, tuple[int, ...]]] = []
        self.aliases: dict[str, str] = {}  # local name → sensitive module it is bound to
        self.headers: list[int] = []

    def flag(self, node: ast.AST, what: str) -> None:
        end = getattr(node, "end_lineno", None) or node.lineno
        self.found.append((node.lineno, end, what, tuple(self.headers)))

    def generic_visit(self, node: ast.AST) -> None:
        is_statement = isinstance(node, ast.stmt)
        if is_statement:
            self.headers.append(node.lineno)
        super().generic_visit(node)
        if is_statement:
            self.headers.pop()

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if _module_flagged(alias.name):
                self.flag(node, f"imports {alias.name}")
            if _top(alias.name) in _SENSITIVE_ALIASES:
                self.aliases[alias.asname or _top(alias.name)] = _top(alias.name)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0 and _module_flagged(module):
            names = {a.name for a in node.names}
            if not (module == "importlib" and names <= {"metadata", "resources"}):
                self.flag(node, f"imports from {module}")
        for alias in node.names:
            if alias.name in _ATTRIBUTES or alias.name in _MODULE_ATTRIBUTES.get(module, ()):
                self.flag(node, f"imports {module}.{alias.name}")
            if node.level == 0 and alias.name in _SENSITIVE_ALIASES:
                self.aliases[alias.asname or alias.name] = alias.name
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in self.aliases:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.aliases[target.id] = self.aliases[node.value.id]
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in {"__builtins__", "__import__"}:
            self.flag(node, f"uses {node.id}")
        elif node.id.startswith("pytest_") and isinstance(node.ctx, ast.Store):
            self.flag(node, f"defines the pytest hook {node.id}")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        # A module loaded as a plugin needs no pytest import: its hooks are found by name.
        if node.name.startswith("pytest_"):
            self.flag(node, f"defines the pytest hook {node.name}")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Attribute(self, node: ast.Attribute) -> None:
        module = self.aliases.get(node.value.id) if isinstance(node.value, ast.Name) else None
        if node.attr in _ATTRIBUTES or node.attr in _MODULE_ATTRIBUTES.get(module or "", ()):
            self.flag(node, f"uses .{node.attr}")
        elif node.attr in _MODULE_NAMES:
            self.flag(node, f"reaches the module {node.attr} as an attribute")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name in _CALLS:
            self.flag(node, f"calls {name}()")
        if name in {"getattr", "setattr", "delattr", "vars"} and node.args:
            target = node.args[0]
            attribute = node.args[1] if len(node.args) > 1 else None
            on_module = isinstance(target, ast.Name) and target.id in self.aliases
            constant = isinstance(attribute, ast.Constant) and isinstance(attribute.value, str)
            if on_module and (name == "vars" or not constant):
                self.flag(node, f"calls {name}() on {target.id} with a computed name")
            elif on_module and attribute.value in _MODULE_ATTRIBUTES.get(
                self.aliases[target.id], ()
            ):
                self.flag(node, f"reads {target.id}.{attribute.value} through {name}()")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            text = node.value.strip()
            if text in _STRINGS or text.startswith(("_pytest.", "pytest", "builtins.")):
                self.flag(node, f"names {text!r}")


def _findings(source: bytes) -> list[tuple[int, int, str, tuple[int, ...]]] | None:
    try:
        tree = python_ast.parse(source)
    except (SyntaxError, ValueError):
        return None  # it cannot be imported either
    visitor = _Visitor()
    visitor.visit(tree)
    return visitor.found


def _is_zip(content: bytes) -> bool:
    """Whether `content` is a zip archive as zipimport finds one: by its end record."""
    return zipfile.is_zipfile(io.BytesIO(content))


def decode(source: bytes) -> str:
    """Source text as Python reads it (its coding cookie honoured)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        return source.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return source.decode("utf-8", errors="replace")


def added_lines(before: bytes | None, after: bytes) -> frozenset[int]:
    """Line numbers (1-based) of `after` that are not in `before`."""
    old = decode(before).splitlines() if before is not None else []
    new = decode(after).splitlines()
    kept: set[int] = set()
    for block in difflib.SequenceMatcher(None, old, new, autojunk=False).get_matching_blocks():
        kept.update(range(block.b + 1, block.b + block.size + 1))
    return frozenset(set(range(1, len(new) + 1)) - kept)


def runner_access(path: str, before: bytes | None, after: bytes) -> list[Finding]:
    """What the patch's version of one file newly does to the test runner."""
    if path.endswith(COMPILED):
        return [Finding(path, 0, "adds a compiled extension module")]
    if path.endswith(ARCHIVES) or _is_zip(after):
        # zipimport reads any file on sys.path that is a zip, whatever its name: code in
        # one is code the check above cannot read. (Only changed files are checked.)
        return [Finding(path, 0, "adds an archive Python can import code from")]
    if not path.endswith(".py"):
        return []
    found = _findings(after)
    if not found:
        return []
    old = Counter(what for *_, what, _h in (_findings(before) or [])) if before else Counter()
    new = Counter(what for *_, what, _h in found)
    added = added_lines(before, after)
    flagged = []
    for first, last, what, headers in found:
        touched = any(n in added for n in range(first, last + 1)) or any(
            h in added for h in headers
        )
        if touched or new[what] > old[what]:
            flagged.append(Finding(path, first, what))
    return flagged
