"""`owner/name`, how code hosts name a repository: the syntax a run config's repository
sources (`tasks.sources.repositories`) and the task tools' (etude.tasks.sources) are
checked against, written once."""

from __future__ import annotations

import re

# Anything else (`..`, an absolute path) could make a lookup leave a checkouts directory.
REPOSITORY_NAME = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


def is_repository_name(name: str) -> bool:
    return bool(REPOSITORY_NAME.fullmatch(name)) and not {".", ".."} & set(name.split("/"))
