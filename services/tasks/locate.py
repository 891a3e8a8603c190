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
"""

from __future__ import annotations

import ast
import random
import sys
import tempfile
from pathlib import Path

from etude.environment.tools.output import numbered_line
from etude.tasks.materialize import (
    HELD_OUT_PROJECTS,
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


def defined_names(source: str) -> list[str]:
    """Public functions and classes a module defines at its top level, in source order."""
    return [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and not node.name.startswith("_")
    ]


def module_names(project: Project) -> dict[str, list[str]]:
    """Each source module that defines a public name, with those names."""
    found = {
        path: defined_names((project.root / path).read_text()) for path in project.source_files
    }
    return {path: names for path, names in sorted(found.items()) if names}


def instruction(name: str, modules: dict[str, list[str]]) -> str:
    listing = "\n".join(f"- `{path}`: {', '.join(names)}" for path, names in modules.items())
    return (
        f"Which file of this repository defines `{name}`? Its modules and the names each one "
        f"defines at the top level:\n\n{listing}\n\n"
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


def project_tasks(project: Project, *, per_project: int = PER_PROJECT, seed: int = 0) -> list[Task]:
    modules = module_names(project)
    owners: dict[str, list[str]] = {}
    for path, names in modules.items():
        for name in names:
            owners.setdefault(name, []).append(path)
    unique = sorted(name for name, paths in owners.items() if len(paths) == 1)
    chosen = sorted(
        random.Random(f"{seed}:{project.name}").sample(unique, min(per_project, len(unique)))
    )
    bug_patch = unified_diff(ANSWER_FILE, None, f"{PLACEHOLDER}\n")
    with tempfile.TemporaryDirectory() as scratch:
        base_commit = build_buggy_repository(project, bug_patch, Path(scratch))
    split = "held_out" if project.name in HELD_OUT_PROJECTS else "train"
    tasks = []
    for name in chosen:
        path = owners[name][0]
        tasks.append(Task(
            id=f"etude-locate.{project.name}.{name}",
            repo=f"etude-mini/{project.name}",
            base_commit=base_commit,
            instruction=instruction(name, modules),
            test_patch=unified_diff(ANSWER_TEST, None, answer_test(path)),
            fail_to_pass=(f"{ANSWER_TEST}::test_answer",),
            pass_to_pass=(),
            test_command=SUITE_COMMAND,
            gold_patch=unified_diff(ANSWER_FILE, f"{PLACEHOLDER}\n", f"{path}\n"),
            metadata={
                "source": SOURCE, "project": project.name,
                "project_hash": project.hash, "bug_patch": bug_patch, "split": split,
                "hint_tier": 3, "name": name, "answer": path, "seed": seed,
            },
        ))  # fmt: skip
    return tasks


def locate_tasks(
    projects_dir: Path = PROJECTS_DIR, *, per_project: int = PER_PROJECT
) -> list[Task]:
    return [
        task
        for root in sorted(p for p in projects_dir.iterdir() if p.is_dir())
        for task in project_tasks(load_project(root), per_project=per_project)
    ]


def is_locate(task: Task) -> bool:
    return task.metadata.get("source") == SOURCE


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else LOCATE_TASKS_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    tasks = locate_tasks()
    write_jsonl(out, tasks)
    print(f"{len(tasks)} tasks → {out}")
