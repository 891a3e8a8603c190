"""etude-locate: "which file defines NAME?", a verifiable tool-use task a small policy can
learn in minutes, through the same services as bug fixing.

A bug fix asks a policy for a long exact quotation (edit_file's old_string) before any
reward comes, so a policy trained from scratch earns nothing until it has memorised its
demonstrations. Here the answer is one path: the instruction lists the project's modules
and the names each defines at the top level, the repository holds a file `ANSWER.txt`
reading `unknown`, and the agent replaces that with the path of the module that defines NAME
(edit_file), then submits. A hidden test reads `ANSWER.txt`. A policy that has learned the
format but not the lookup picks one of the listed paths, so rewards start between 0 and 1
and RL has something to compare, which is what a quick learning check of a small policy
needs.

The tasks are written at hint tier 3 (the instruction holds everything, the episode is one
turn: edit, submit) from the bundled etude-mini projects, and keep their split: held-out
projects stay held out. `python -m etude.tasks.locate` rewrites the bundled JSONL.

A training project alone asks a dozen questions of one unchanging listing, so a policy can
learn each name's file by heart instead of reading the listing, and on a held-out project
it then writes a path it remembers. So each training project also gives tasks whose
repository gains stub modules (`stub_modules`): made-up names dealt at random into modules
with new names, a different deal per task, asked about through the same instruction (the
`etude-locate-stubbed` set: the projects' own tasks and these). Only reading the listing
answers those. Held-out tasks are the projects' own modules, untouched.
"""

from __future__ import annotations

import ast
import random
import sys
import tempfile
from pathlib import Path

from etude.common import python_ast
from etude.common.tool_text import numbered_line
from etude.tasks.hints import HINT_TIERS
from etude.tasks.materialize import (
    HELD_OUT_PROJECTS,
    LOCATE_STUBBED_TASKS_FILE,
    LOCATE_TASKS_FILE,
    PROJECTS_DIR,
    build_buggy_repository,
)
from etude.tasks.repo import unified_diff
from etude.tasks.synth.synthesize import SUITE_COMMAND, Project, load_project
from etude.tasks.task import Task, write_jsonl

SOURCE = "etude-locate"
"""`metadata.source` of these tasks, which is how a solver or a run tells them apart."""
ANSWER_FILE = "ANSWER.txt"
PLACEHOLDER = "unknown"
ANSWER_TEST = "tests/test_answer.py"
PER_PROJECT = 12
"""Names asked about per project (a seeded choice among the names only one module defines)."""
STUBBED_PER_PROJECT = 24
"""Tasks per training project whose repository gains stub modules (a new deal each)."""
_VERBS = (
    "apply", "build", "check", "collect", "compile", "convert", "count", "decode", "emit",
    "encode", "expand", "fetch", "filter", "find", "flatten", "format", "group", "index",
    "load", "lookup", "match", "merge", "normalize", "pack", "parse", "read", "render", "reset",
    "resolve", "scan", "select", "sort", "split", "store", "strip", "trim", "unpack", "update",
    "validate", "write",
)  # fmt: skip
_NOUNS = (
    "anchor", "batch", "block", "bound", "buffer", "cell", "chunk", "column", "cursor", "delta",
    "digest", "entry", "field", "frame", "graph", "header", "label", "ledger", "margin",
    "marker", "node", "offset", "option", "packet", "page", "path", "record", "region",
    "sample", "schema", "segment", "signal", "slot", "span", "stack", "symbol", "table",
    "token", "vector", "weight",
)  # fmt: skip
_ADJECTIVES = (
    "active", "basic", "cached", "compact", "default", "dense", "empty", "fixed", "global",
    "inner", "lazy", "local", "nested", "open", "partial", "plain", "raw", "sparse", "strict",
    "typed",
)  # fmt: skip
"""Stub names are made of these words (`stub_name`), so nearly every stub name is new: a
policy cannot learn stub names' files by heart either."""


def stub_name(rng: random.Random) -> str:
    """A function name (`merge_ledger`, `load_raw_span`) or a class name (`LazyCursor`)."""
    if rng.random() < 0.35:
        return rng.choice(_ADJECTIVES).title() + rng.choice(_NOUNS).title()
    words = [rng.choice(_VERBS), *([rng.choice(_ADJECTIVES)] if rng.random() < 0.3 else []),
             rng.choice(_NOUNS)]  # fmt: skip
    return "_".join(words)


def defined_names(source: str) -> list[str]:
    """Public functions and classes a module defines at its top level, in source order."""
    return [
        node.name
        for node in python_ast.parse(source).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and not node.name.startswith("_")
    ]


def module_names(project: Project) -> dict[str, list[str]]:
    """Each source module that defines a public name, with those names."""
    found = {
        path: defined_names((project.root / path).read_text()) for path in project.source_files
    }
    return {path: names for path, names in sorted(found.items()) if names}


def instruction(name: str, modules: dict[str, list[str]], tier: int = 3) -> str:
    """The question at a hint tier: tier 3 lists the modules with the names each defines,
    tiers 1 and 2 the modules alone, tier 0 nothing (the agent searches the repository)."""
    if tier >= 3:
        listing = "\n".join(f"- `{path}`: {', '.join(names)}" for path, names in modules.items())
        shown = f" Its modules and the names each one defines at the top level:\n\n{listing}"
    elif tier >= 1:
        shown = " Its modules:\n\n" + "\n".join(f"- `{path}`" for path in modules)
    else:
        shown = ""
    return (
        f"Which file of this repository defines `{name}`?{shown}\n\n"
        f"`{ANSWER_FILE}`, as read_file shows it:\n\n```\n{numbered_line(1, PLACEHOLDER)}\n```\n\n"
        f"Replace `{PLACEHOLDER}` with the path of the file that defines `{name}` (edit_file), "
        "then call submit."
    )


def answer_test(path: str) -> str:
    return (
        "from pathlib import Path\n\n\n"
        "def test_answer():\n"
        f'    answer = Path(__file__).resolve().parents[1] / "{ANSWER_FILE}"\n'
        f'    assert answer.read_text().strip() == "{path}"\n'
    )


def _owners(modules: dict[str, list[str]]) -> dict[str, list[str]]:
    owners: dict[str, list[str]] = {}
    for path, names in modules.items():
        for name in names:
            owners.setdefault(name, []).append(path)
    return owners


def _base_commit(project: Project, bug_patch: str) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        return build_buggy_repository(project, bug_patch, Path(scratch))


def _project_metadata(project: Project, seed: int) -> dict:
    """What every task of the project records alike (its content hash read once)."""
    return {
        "source": SOURCE, "project": project.name, "project_hash": project.hash,
        "split": "held_out" if project.name in HELD_OUT_PROJECTS else "train",
        "hint_tier": 3, "seed": seed,
    }  # fmt: skip


def _task(
    common: dict, task_id: str, name: str, path: str, modules: dict[str, list[str]],
    bug_patch: str, base_commit: str,
) -> Task:  # fmt: skip
    return Task(
        id=task_id,
        repo=f"etude-mini/{common['project']}",
        base_commit=base_commit,
        instruction=instruction(name, modules),
        test_patch=unified_diff(ANSWER_TEST, None, answer_test(path)),
        fail_to_pass=(f"{ANSWER_TEST}::test_answer",),
        pass_to_pass=(),
        test_command=SUITE_COMMAND,
        gold_patch=unified_diff(ANSWER_FILE, f"{PLACEHOLDER}\n", f"{path}\n"),
        metadata={
            **common,
            "bug_patch": bug_patch,
            "name": name,
            "answer": path,
            "instructions": {str(tier): instruction(name, modules, tier) for tier in HINT_TIERS},
        },
    )


def project_tasks(project: Project, *, per_project: int = PER_PROJECT, seed: int = 0) -> list[Task]:
    modules = module_names(project)
    owners = _owners(modules)
    unique = sorted(name for name, paths in owners.items() if len(paths) == 1)
    chosen = sorted(
        random.Random(f"{seed}:{project.name}").sample(unique, min(per_project, len(unique)))
    )
    bug_patch = unified_diff(ANSWER_FILE, None, f"{PLACEHOLDER}\n")
    base_commit = _base_commit(project, bug_patch)  # one repository serves every name
    common = _project_metadata(project, seed)
    return [
        _task(common, f"etude-locate.{project.name}.{name}", name, owners[name][0], modules,
              bug_patch, base_commit)
        for name in chosen
    ]  # fmt: skip


def stub_source(names: list[str]) -> str:
    """A module defining `names`: classes for capitalised names, functions for the rest."""
    body = '    """Made up for an etude-locate task: only its name and place matter."""\n'
    blocks = [
        f"class {name}:\n{body}" if name[0].isupper() else f"def {name}(*args, **kwargs):\n{body}"
        for name in names
    ]
    return '"""Stubs."""\n\n\n' + "\n\n".join(blocks)


def stub_modules(
    own: dict[str, list[str]], excluded: set[str], rng: random.Random
) -> dict[str, str]:
    """One to three new modules beside the project's own (`own`, path → names), each defining
    three to six made-up names, none of them in `excluded`; path → source.

    About half the modules go into a new package with a made-up name: were every answer under
    one of the training projects' packages, a policy could recall the package from what the
    project is about instead of copying the path it found, and on a held-out project (a
    package it has never written) it would write a training project's."""
    own_package = next(iter(own)).split("/")[0]
    taken = {Path(path).stem for path in own}
    stems = rng.sample(sorted({f"{noun}s" for noun in _NOUNS} - taken), rng.randint(1, 3))
    packages = [
        own_package if rng.random() < 0.5 else f"{rng.choice(_ADJECTIVES)}_{rng.choice(_NOUNS)}"
        for _ in stems
    ]
    names: list[str] = []
    while len(names) < 6 * len(stems):
        name = stub_name(rng)
        if name not in excluded and name not in names:
            names.append(name)
    modules = {}
    for stem, package in zip(stems, packages, strict=True):
        count = rng.randint(3, 6)
        modules[f"{package}/{stem}.py"], names = stub_source(names[:count]), names[count:]
    return modules


def stubbed_tasks(
    project: Project, excluded: set[str], *, count: int = STUBBED_PER_PROJECT, seed: int = 0
) -> list[Task]:
    """Tasks on the project with stub modules added, a new deal each."""
    own = module_names(project)
    common = _project_metadata(project, seed)
    tasks = []
    for index in range(count):
        rng = random.Random(f"{seed}:{project.name}:stubs:{index}")
        stubs = stub_modules(own, excluded, rng)
        modules = dict(sorted({**own, **{p: defined_names(s) for p, s in stubs.items()}}.items()))
        # Any name the repository defines once: asking only about stubs would teach "the answer
        # is a module the project did not have", which fails on every held-out project. A
        # package is drawn first, so a made-up package holds the answer about as often as
        # the project's own does.
        owners = _owners(modules)
        package = rng.choice(sorted({path.split("/")[0] for path in modules}))
        in_package = [n for n, paths in owners.items()
                      if len(paths) == 1 and paths[0].startswith(f"{package}/")]  # fmt: skip
        name = rng.choice(sorted(in_package))
        bug_patch = "".join(
            unified_diff(path, None, text)
            for path, text in [(ANSWER_FILE, f"{PLACEHOLDER}\n"), *sorted(stubs.items())]
        )
        task_id = f"etude-locate.{project.name}.stubs{index:02d}.{name}"
        base_commit = _base_commit(project, bug_patch)
        tasks.append(_task(common, task_id, name, owners[name][0], modules, bug_patch,
                           base_commit))  # fmt: skip
    return tasks


def locate_tasks(
    projects_dir: Path = PROJECTS_DIR,
    *,
    per_project: int = PER_PROJECT,
    stubbed_per_project: int = 0,
) -> list[Task]:
    """The projects' own tasks, and `stubbed_per_project` stubbed tasks per training project
    (the `etude-locate-stubbed` set)."""
    roots = sorted(path for path in projects_dir.iterdir() if path.is_dir())
    projects = [load_project(root) for root in roots]
    # No stub takes a name a project defines: held-out names stay unseen in training, and a
    # stub never shadows a real definition.
    defined = {name for project in projects for names in module_names(project).values()
               for name in names}  # fmt: skip
    tasks = []
    for project in projects:
        tasks += project_tasks(project, per_project=per_project)
        if project.name not in HELD_OUT_PROJECTS:
            tasks += stubbed_tasks(project, defined, count=stubbed_per_project)
    return tasks


def is_locate(task: Task) -> bool:
    return task.metadata.get("source") == SOURCE


if __name__ == "__main__":
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else LOCATE_TASKS_FILE.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, stubbed in ((LOCATE_TASKS_FILE.name, 0),
                          (LOCATE_STUBBED_TASKS_FILE.name, STUBBED_PER_PROJECT)):  # fmt: skip
        tasks = locate_tasks(stubbed_per_project=stubbed)
        write_jsonl(out_dir / name, tasks)
        print(f"{len(tasks)} tasks → {out_dir / name}")
