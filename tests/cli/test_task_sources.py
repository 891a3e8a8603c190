"""Which tasks `etude tasks verify` and `grade` grade in a Python environment, from their
records and the options."""

from __future__ import annotations

from dataclasses import replace

import pytest
import typer

from etude.cli.task_sources import task_provisioning
from etude.tasks.pyenv import PackageSource
from etude.tasks.sources import RepositorySources
from etude.tasks.task import Setup, Task

PLAIN = Task(
    id="lib.off_by_one.0", repo="lib", base_commit="ab" * 20, instruction="",
    test_patch="", fail_to_pass=(), pass_to_pass=(),
)  # fmt: skip
SYNTHESIZED_IN_ONE = replace(PLAIN, metadata={"python_environment": True})
INSTALLING = replace(PLAIN, setup=Setup(pip_packages=("six",)))
BUNDLED = replace(PLAIN, repo="etude-mini/calcparse")


@pytest.mark.parametrize(
    ("tasks", "environment", "expected"),
    [
        ([PLAIN], None, "off"),
        ([PLAIN, SYNTHESIZED_IN_ONE], None, "auto"),  # the record says so
        ([INSTALLING], None, "auto"),  # an install specification
        ([SYNTHESIZED_IN_ONE], False, "off"),
        ([PLAIN], True, "auto"),
    ],
)
def test_a_task_whose_record_says_so_gets_an_environment(tasks, environment, expected):
    provisioning = task_provisioning(tasks, RepositorySources(), environment, None, None)
    assert provisioning.environments == expected


def test_bundled_tasks_never_get_one_and_packages_come_from_the_options(tmp_path, capsys):
    provisioning = task_provisioning([BUNDLED], RepositorySources(), True, tmp_path, None)
    assert not provisioning.wants_environment(BUNDLED)
    assert provisioning.packages == PackageSource(tmp_path)
    assert "--wheelhouse and --index-url are not used" in capsys.readouterr().err


def test_a_missing_wheelhouse_is_an_error(tmp_path):
    with pytest.raises(typer.Exit):
        task_provisioning([PLAIN], RepositorySources(), None, tmp_path / "nowhere", None)
