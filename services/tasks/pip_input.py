"""What pip may be given to build a task's environment (etude.tasks.pyenv): package
requirements, and requirements files of the repository.

The install specification of a task record (`pip_packages`, SWE-bench's `packages`,
`reqs_path`) is data from the internet, and pip takes whatever it is given as orders:
`--target DIR` and `--log FILE` write where they say, `-r FILE` reads any file and prints
it in its errors, an index option or a URL fetches from wherever it names. So each entry
must be a requirement of a package of the run's index or wheelhouse, and the requirements
files the record names must lie in the repository and hold no option but a few harmless
ones. pip reads those files in the build's sandbox, where nothing of the host is.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from etude.tasks.task import Setup


class RequirementError(ValueError):
    """An entry or a requirements file pip is not given; the message says which and why."""


# pip reads a requirement that ends like this as a file of the working directory.
ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz",
                    ".txz", ".tar.lz", ".tlz")  # fmt: skip


def requirement(entry: str, field: str) -> str:
    """`entry` (of the setup's `field`) as pip receives it: a requirement of a package of
    the run's index or wheelhouse, `name[extras] specifier; marker`. Never an option
    (`--target`, `-r`), a path or a URL: pip would take those as orders, or fetch from
    where the run did not say. A direct reference (`name @ URL`) is refused too: its URL is
    a package source of the record's choosing."""
    shown = entry if len(entry) <= 200 else entry[:200] + "…"
    if entry.strip().startswith("-"):
        raise RequirementError(f"{field} entry {shown!r} is an option, not a package requirement")
    try:
        parsed = Requirement(entry.strip())
    except InvalidRequirement as error:
        raise RequirementError(
            f"{field} entry {shown!r} is not a package requirement: {error}"
        ) from None
    if parsed.url:
        raise RequirementError(
            f"{field} entry {shown!r} is a direct reference (name @ URL): packages "
            "come from the run's index or wheelhouse only"
        )
    if parsed.name.lower().endswith(ARCHIVE_SUFFIXES):
        raise RequirementError(f"{field} entry {shown!r} names an archive file, not a package")
    return str(parsed)


def named_packages(setup: Setup) -> list[str]:
    """SWE-bench's `packages` naming packages (not a requirements or conda file)."""
    packages = setup.packages
    return packages.split() if packages and not packages.endswith((".txt", ".yml", ".yaml")) else []


def requirement_files(setup: Setup, source: Path) -> list[str]:
    """The requirements files the setup names (SWE-bench's `packages` naming a file,
    SWE-rebench's `reqs_path`), relative to the repository at `source`, each checked."""
    packages = setup.packages
    if packages.endswith((".yml", ".yaml")):
        raise RequirementError(f"conda environments ({packages}) are not built")
    files = [*setup.reqs_path, *([packages] if packages.endswith(".txt") else [])]
    top = source.resolve()
    checked = []
    for name in files:
        real = _check_file(top, top / name, name, set())
        checked.append(str(real.relative_to(top)))
    return checked


# Option lines a requirements file may hold, and whether each takes a value. Options that
# choose another package source (`--index-url`, `--find-links`, …) are refused: packages
# come from the run's index or wheelhouse.
FILE_OPTIONS = {
    "-r": True, "--requirement": True, "-c": True, "--constraint": True, "-e": True,
    "--editable": True, "--pre": False, "--prefer-binary": False, "--only-binary": True,
    "--no-binary": True,
}  # fmt: skip


def _check_file(top: Path, path: Path, shown: str, seen: set) -> Path:
    """The real path of the requirements file `path` (named `shown`) and of every file it
    includes (`-r`, `-c`), each inside the repository at `top`, with no option line but
    `FILE_OPTIONS`; RequirementError naming what is refused. pip reads the files in
    the sandbox, where a path out of the repository finds nothing of the host: refusing
    them says so at once, instead of as a missing file."""
    real = path.resolve()
    if not real.is_relative_to(top):
        raise RequirementError(f"requirements file {shown} is outside the repository")
    if not real.is_file():
        raise RequirementError(f"no requirements file {shown} in the repository")
    if real in seen:
        return real
    seen.add(real)
    for line in _logical_lines(real.read_text(errors="replace")):
        if not line.startswith("-"):
            continue  # a requirement: pip reads it in the sandbox, with the run's index
        try:
            words = shlex.split(line)
        except ValueError:
            words = [line]
        index = 0
        while index < len(words):
            option, inline, value = words[index].partition("=")
            if not option.startswith("--") and len(option) > 2:  # -rfile
                option, inline, value = option[:2], "=", words[index][2:]
            index += 1
            if option not in FILE_OPTIONS:
                raise RequirementError(
                    f"requirements file {shown}: {words[index - 1][:100]!r} is not "
                    "allowed (only requirements, -r, -c, -e of the repository, --pre, "
                    "--prefer-binary, --only-binary, --no-binary)"
                )
            if FILE_OPTIONS[option] and not inline:
                value = words[index] if index < len(words) else ""
                index += 1
            if "$" in value:
                raise RequirementError(
                    f"requirements file {shown}: {option} {value[:100]!r} names a variable"
                )
            if option in ("-r", "--requirement", "-c", "--constraint"):
                _check_file(top, real.parent / value, value, seen)
            elif option in ("-e", "--editable"):
                # A directory of the repository, never a URL or a VCS (`git+https://…`).
                target = (top / re.sub(r"\[[^\]]*\]$", "", value)).resolve()
                if "://" in value or "+" in value.split("/")[0] or not target.is_relative_to(top):
                    raise RequirementError(
                        f"requirements file {shown}: -e {value[:100]!r} is not a "
                        "directory of the repository"
                    )
    return real


def _logical_lines(text: str) -> list[str]:
    """The lines of a requirements file as pip reads them: continuations joined, comments
    and blank lines dropped."""
    joined = re.sub(r"\\\r?\n", "", text)
    lines = (re.sub(r"(^|\s+)#.*$", "", line).strip() for line in joined.splitlines())
    return [line for line in lines if line]
