"""Where `etude tasks` finds what tasks need beyond their records, from its options: the
repositories and projects (`--path`, `--checkouts`, `--repository`: one RepositorySources)
and the Python environments graded tasks get (`--environment`, `--wheelhouse`,
`--index-url`: a run's TaskProvisioning, etude.tasks.provisioning). And how its commands
fail: one line the user can act on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from etude.tasks.provisioning import TaskProvisioning
from etude.tasks.pyenv import PackageSource
from etude.tasks.sources import RepositorySources, is_repository_name
from etude.tasks.task import Task

# soft_wrap: a message is one line however narrow the terminal (paths and test ids stay
# whole, and a log file can be grepped).
console = Console(stderr=True, soft_wrap=True)

PathsOption = Annotated[
    list[Path],
    typer.Option("--path", help="The project directory or sdist tasks were synthesized from."),
]
CacheOption = Annotated[Path, typer.Option(help="Where repositories go.")]
CheckoutsOption = Annotated[
    list[Path],
    typer.Option(
        "--checkouts",
        help="A directory of git repositories for SWE-bench-style tasks (owner__name, "
        "owner/name, either with .git).",
    ),
]
RepositoryOption = Annotated[
    list[str],
    typer.Option("--repository", help="owner/name=PATH: the git repository of owner/name."),
]
EnvironmentOption = Annotated[
    bool | None,
    typer.Option(
        "--environment/--no-environment",
        help="Grade tasks that are not bundled in a Python environment of their project's "
        "packages, built with pip under the cache's envs/ (default: when a task's record says "
        "its tests ran in one).",
        show_default=False,
    ),
]
WheelhouseOption = Annotated[
    Path | None, typer.Option(help="Build environments from this directory of wheels only.")
]
IndexUrlOption = Annotated[
    str | None, typer.Option(help="Build environments from this package index.")
]


def fail(message: str) -> typer.Exit:
    """An error the user can act on: one line, no traceback, exit status 1."""
    console.print(f"[red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(1)


def task_sources(
    tasks: list[Task], paths: list[Path], checkouts: list[Path], repositories: list[str]
) -> RepositorySources:
    """Where the repositories of `tasks` come from, from the options; a task synthesized
    from a path needs that project given again (`--path`), said before any work starts."""
    needing = [t for t in tasks if t.metadata.get("origin")]
    if needing and not paths:
        origins = [t.metadata["origin"] for t in needing]
        made_from = sorted({str(o.get("file") or o.get("path")) for o in origins})
        raise fail(
            f"{len(needing)} tasks were synthesized from {', '.join(made_from)}: "
            "pass it with --path"
        )
    named = {}
    for value in repositories:
        name, _, where = value.partition("=")
        if not is_repository_name(name) or not where:
            raise fail(f"--repository {value}: expected owner/name=PATH")
        named[name] = Path(where).expanduser()
    return RepositorySources(named, tuple(checkouts), tuple(paths))


def task_provisioning(
    tasks: list[Task],
    given: RepositorySources,
    environment: bool | None,
    wheelhouse: Path | None,
    index_url: str | None,
) -> TaskProvisioning:
    """The tasks prepared as a run prepares them (etude.tasks.provisioning): with Python
    environments when asked, or by default when a task's record says its tests ran in
    one (synthesized with `--environment`, an install specification)."""
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise fail(f"--wheelhouse {wheelhouse}: no such directory")
    if wheelhouse is not None and index_url is not None:
        raise fail("give --wheelhouse or --index-url, not both")
    if environment is None:
        environment = any(
            t.metadata.get("python_environment") or t.setup.to_install_config() for t in tasks
        )  # fmt: skip
    packages = PackageSource(wheelhouse, index_url)
    provisioning = TaskProvisioning(given, packages, "auto" if environment else "off")
    wanting = sum(provisioning.wants_environment(t) for t in tasks)
    if wanting:
        console.print(
            f"{wanting} of {len(tasks)} tasks are graded in a Python environment of their "
            "project's packages (built with pip unless already in the cache).",
            highlight=False,
        )
    elif packages != PackageSource():
        console.print(
            "note: no task here is graded in a Python environment, so --wheelhouse and "
            "--index-url are not used (--environment gives every task that is not bundled one).",
            highlight=False,
        )
    return provisioning
