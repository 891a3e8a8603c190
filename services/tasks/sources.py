"""Where the repositories of tasks come from on this machine (bundled tasks aside, whose
projects ship with etude).

A SWE-bench-style task names its repository `owner/name`. A `RepositorySources` maps that
name to a git repository: one named on its own (`owner/name=PATH`: a working checkout, e.g.
a project of your own, or a bare mirror), or one found in a directory of them, as
`owner__name`, `owner/name`, or either with `.git` appended (how `git clone --mirror` names
a mirror). Only the task's base commit is ever taken out of it
(etude.tasks.repo.export_commit), so a source may hold any history, the fixes included.

A task synthesized from a project path (`metadata.origin`) is rebuilt from that project
given again: one of `projects`, a directory or an sdist, matched on the project's name and
content hash (etude.tasks.synth.sources.source_of).

A repository found here is never one that reaches the stack's credentials or its services'
data (etude.common.run_config.protected_dirs), symlinks resolved when it is looked up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# Re-exported: the task tools check `owner/name` arguments with it.
from etude.common.repository_names import is_repository_name
from etude.common.run_config import protected_overlap, stack_protected_dirs


class SourceNotFoundError(LookupError):
    """No source holds the repository; the message says where it was looked for."""


@dataclass(frozen=True, slots=True)
class RepositorySources:
    repositories: Mapping[str, Path] = field(default_factory=dict)
    """Repositories named one by one, `owner/name` → path; looked at first."""
    checkouts: tuple[Path, ...] = ()
    """Directories of repositories (checkouts or bare mirrors), searched in order."""
    projects: tuple[Path, ...] = ()
    """Project directories or sdists that tasks synthesized from a path are rebuilt from."""

    @classmethod
    def parse(cls, values: Iterable[str]) -> RepositorySources:
        """From command-line values: `owner/name=PATH` names one repository, a plain
        `PATH` a directory of them."""
        repositories: dict[str, Path] = {}
        checkouts: list[Path] = []
        for value in values:
            name, equals, path = value.partition("=")
            if not equals:
                checkouts.append(Path(value).expanduser())
            elif not is_repository_name(name) or not path:
                raise ValueError(f"{value!r}: expected owner/name=PATH or a directory")
            else:
                repositories[name] = Path(path).expanduser()
        return cls(repositories, tuple(checkouts))

    def with_checkouts(self, directory: Path | None) -> RepositorySources:
        """These sources, then `directory` (the older `checkouts_dir` argument)."""
        if directory is None or directory in self.checkouts:
            return self
        return RepositorySources(self.repositories, (*self.checkouts, directory), self.projects)

    def locate(self, repo: str) -> Path:
        """The repository for `repo` (`owner/name`); SourceNotFoundError when none holds it."""
        if repo in self.repositories:
            named = self.repositories[repo]
            if not is_repository(named):
                raise SourceNotFoundError(f"{repo}: {named} is not a git repository")
            return unprotected(repo, named)
        if not is_repository_name(repo):
            raise SourceNotFoundError(f"{repo!r} is not an owner/name repository name")
        if not self.checkouts:
            raise SourceNotFoundError(
                f"{repo}: no repository sources given (a directory of checkouts, or {repo}=PATH)"
            )
        flat = repo.replace("/", "__")
        names = (flat, repo, f"{flat}.git", f"{repo}.git")
        for directory in self.checkouts:
            for name in names:
                if is_repository(directory / name):
                    return unprotected(repo, directory / name)
        looked = ", ".join(str(d) for d in self.checkouts)
        raise SourceNotFoundError(f"{repo}: no {' or '.join(names)} in {looked}")


def unprotected(what: str, path: Path) -> Path:
    """`path`, unless it reaches the stack's own directories; SourceNotFoundError then."""
    if (reached := protected_overlap(path, stack_protected_dirs())) is not None:
        raise SourceNotFoundError(
            f"{what}: {path} reaches {reached}, the stack's own, which is never a task's source"
        )
    return path


def is_repository(path: Path) -> bool:
    """A working checkout (`.git`, a directory or a worktree's file) or a bare repository."""
    if (path / ".git").exists():
        return True
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()
