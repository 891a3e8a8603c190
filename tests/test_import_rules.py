"""The import rules of docs/architecture.md, checked over services/ and kernels/.

The table of allowed edges between top-level folders is read from docs/architecture.md
(section "Allowed imports"), so it is written down once. A cross-folder import must follow
an edge of the table, and an import into a service folder may name only that service's
public surface (`types`, `client`, `config`), never its core modules. The table itself has
no loop.

`python -m tests.test_import_rules` prints the folder graph as the code has it today.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
_GENERATED = "api/v1/"


@dataclass(frozen=True, slots=True)
class Import:
    path: str
    """The importing file, relative to the repository root."""
    line: int
    source: str
    """The importing file's top-level folder (`kernels` for kernels/)."""
    module: str
    """The imported module, e.g. `etude.reward.client`."""

    @property
    def target(self) -> str:
        return self.module.split(".")[1]

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.module}"


def cross_folder_imports(root: Path = ROOT) -> list[Import]:
    """Every import of an `etude` module of another top-level folder, in services/ and
    kernels/ (the generated stubs excluded)."""
    found = []
    for base in ("services", "kernels"):
        for file in sorted((root / base).rglob("*.py")):
            relative = file.relative_to(root / base)
            top_level = base == "services" and len(relative.parts) < 2  # services/__init__.py
            if top_level or relative.as_posix().startswith(_GENERATED):
                continue
            source = "kernels" if base == "kernels" else relative.parts[0]
            for line, module in sorted(set(_imported_modules(file, root / "services"))):
                if module.startswith("etude.") and module.split(".")[1] != source:
                    found.append(Import(str(file.relative_to(root)), line, source, module))
    return found


def _imported_modules(file: Path, services: Path) -> list[tuple[int, str]]:
    """(line, module) of each import; `from etude.x import y` names `etude.x.y` where y is a
    module of its own, so importing a core module by its parent package is still seen."""
    modules = []
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            modules += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                modules.append((node.lineno, sub if _is_module(sub, services) else node.module))
    return modules


def _is_module(module: str, services: Path) -> bool:
    parts = module.split(".")[1:]
    if not parts:
        return False
    base = services.parent / "kernels" if parts[0] == "kernels" else services
    rest = parts[1:] if parts[0] == "kernels" else parts
    path = base.joinpath(*rest)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@dataclass(frozen=True, slots=True)
class Rules:
    """The table under "## Allowed imports" in docs/architecture.md."""

    edges: dict[str, set[str]]
    """Folder → the folders it may import."""
    surfaces: dict[str, set[str]]
    """Service folder → its public modules; a folder without any is a library, importable
    whole by the folders allowed to."""


def read_rules(text: str | None = None) -> Rules:
    text = ARCHITECTURE.read_text() if text is None else text
    section = text.split("## Allowed imports", 1)[1].split("\n## ", 1)[0]
    edges: dict[str, set[str]] = {}
    surfaces: dict[str, set[str]] = {}
    for folder, targets, public in re.findall(r"^\| *`(\w+)` *\|([^|]*)\|([^|]*)\|", section, re.M):
        edges[folder] = set(re.findall(r"\w+", targets))
        if names := set(re.findall(r"\w+", public)):
            surfaces[folder] = names
    return Rules(edges, surfaces)


def violations(imports: list[Import], rules: Rules) -> list[str]:
    found = []
    for imp in imports:
        surface = rules.surfaces.get(imp.target)
        if imp.target not in rules.edges.get(imp.source, set()):
            found.append(f"{imp}: {imp.source} → {imp.target} is not an allowed import")
        elif surface is not None and _module_in(imp.module) not in surface:
            shown = ", ".join(sorted(surface))
            found.append(f"{imp}: {imp.target}'s public surface is {shown}")
    return found


def _module_in(module: str) -> str:
    """The module's name inside its folder: `client` for etude.reward.client."""
    parts = module.split(".")
    return parts[2] if len(parts) >= 3 else ""


def loops(edges: dict[str, set[str]]) -> list[list[str]]:
    """The folders that reach each other (strongly connected groups of two or more)."""
    reach = {a: _reachable(a, edges) for a in edges}
    groups = {frozenset(b for b in reach[a] if a in reach.get(b, ())) | {a} for a in edges}
    return sorted(sorted(g) for g in groups if len(g) > 1)


def _reachable(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def folder_graph(imports: list[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.source, set()).add(imp.target)
    return graph


# -- tests -----------------------------------------------------------------------------------


def test_every_cross_folder_import_follows_the_architecture_table():
    found = violations(cross_folder_imports(), read_rules())
    assert not found, "imports the architecture does not allow:\n" + "\n".join(found)


def test_the_allowed_imports_have_no_loop():
    assert loops(read_rules().edges) == []
    assert loops(folder_graph(cross_folder_imports())) == []


def test_every_folder_is_in_the_table():
    folders = {p.name for p in (ROOT / "services").iterdir() if (p / "__init__.py").exists()}
    assert folders | {"kernels"} <= set(read_rules().edges)


def test_a_planted_core_import_and_a_planted_edge_are_caught(tmp_path):
    """The checker run over a tree with two violations planted: the reward service importing
    the rollout's agent (an edge the table lacks) and the rollout importing the reward's
    grader (an allowed edge, but a core module)."""
    (tmp_path / "docs").mkdir()
    for folder, text in {
        "reward": "from etude.rollout.agent import EpisodeRunner\n",
        "rollout": "from etude.reward import grader\nfrom etude.reward.client import X\n",
    }.items():
        (tmp_path / "services" / folder).mkdir(parents=True)
        (tmp_path / "services" / folder / "__init__.py").write_text("")
        (tmp_path / "services" / folder / "bad.py").write_text(text)
    (tmp_path / "services" / "reward" / "grader.py").write_text("")
    (tmp_path / "kernels").mkdir()
    rules = Rules(edges={"reward": set(), "rollout": {"reward"}},
                  surfaces={"reward": {"client", "types"}, "rollout": {"client"}})  # fmt: skip
    found = violations(cross_folder_imports(tmp_path), rules)
    assert found == [
        "services/reward/bad.py:1 imports etude.rollout.agent: reward → rollout is not an "
        "allowed import",
        "services/rollout/bad.py:1 imports etude.reward.grader: reward's public surface is "
        "client, types",
    ]


@pytest.mark.parametrize("table, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
])  # fmt: skip
def test_loops_are_found(table, expected):
    assert loops(table) == expected


if __name__ == "__main__":
    imports = cross_folder_imports()
    graph = folder_graph(imports)
    for source in sorted(graph):
        counts = {t: sum(1 for i in imports if (i.source, i.target) == (source, t))
                  for t in sorted(graph[source])}  # fmt: skip
        print(f"{source} → " + ", ".join(f"{t} ({n})" for t, n in counts.items()))
    print("loops:", loops(graph) or "none")
    sys.exit(0)
