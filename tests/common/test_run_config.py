"""Run configs: YAML plus dotted overrides, and clear errors for bad keys and values."""

from __future__ import annotations

from pathlib import Path

import pytest

from etude.common.run_config import RunConfigError, load_run_config


def test_overrides_apply_on_top_of_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("name: demo\nrollout:\n  group_size: 4\ntrainer:\n  steps: 9\n")
    config = load_run_config(path, ["rollout.group_size=2", "trainer.loss.tis_cap=null"])
    assert (config.name, config.rollout.group_size, config.trainer.steps) == ("demo", 2, 9)
    assert config.trainer.loss.tis_cap is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["rollout.group_sise=2"], "rollout.group_sise: Extra inputs are not permitted"),
        (["trainer.precision=fp4"], "trainer.precision"),
        (["rollout.group_size=0"], "rollout.group_size"),
        (["steps"], "is not section.key=value"),
    ],
)
def test_a_typo_or_a_bad_value_is_an_error_naming_the_key(overrides, message):
    with pytest.raises(RunConfigError, match=message):
        load_run_config(None, overrides)


def test_the_bundled_local_config_is_valid():
    from pathlib import Path

    config = load_run_config(Path(__file__).parents[2] / "configs" / "local-tiny.yaml")
    assert config.policy.init == "tiny" and config.sft.enabled


@pytest.mark.parametrize("name", ["local-tiny", "local-smollm2", "locate-smollm2"])
def test_every_bundled_config_loads(name):
    from pathlib import Path

    config = load_run_config(Path(__file__).parents[2] / "configs" / f"{name}.yaml")
    assert config.name == name and config.trainer.steps > 0


def test_task_sources_are_read_from_the_working_directory_and_made_absolute(tmp_path, monkeypatch):
    """What is registered with a run must mean the same to workers running elsewhere."""
    monkeypatch.chdir(tmp_path)
    config = load_run_config(None, [
        "tasks.sources.repositories={acme/shapes: repos/shapes, acme/x: /srv/x}",
        "tasks.sources.checkouts=[mirrors, ~/more]", "tasks.sources.projects=[dist/p.tar.gz]",
        "tasks.packages.wheelhouse=../wheels",
    ])  # fmt: skip
    sources = config.tasks.sources
    assert sources.repositories == {
        "acme/shapes": tmp_path / "repos/shapes",
        "acme/x": Path("/srv/x"),
    }
    assert sources.checkouts == (tmp_path / "mirrors", Path.home() / "more")
    assert sources.projects == (tmp_path / "dist/p.tar.gz",)
    assert config.tasks.packages.wheelhouse == tmp_path.parent / "wheels"
    assert config.tasks.environments == "auto"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["tasks.sources.repositories={../etc: /x}"], "not an owner/name repository name"),
        (["tasks.sources.repositories={acme/..: /x}"], "not an owner/name repository name"),
        (["tasks.sources.repositories={shapes: /x}"], "not an owner/name repository name"),
        (["tasks.packages={wheelhouse: w, index_url: 'https://pypi.example'}"], "not both"),
        (["tasks.environments=always"], "tasks.environments"),
        (["tasks.sources.mirrors=[x]"], "tasks.sources.mirrors: Extra inputs"),
    ],
)
def test_bad_task_sources_are_errors_naming_the_key(overrides, message):
    with pytest.raises(RunConfigError, match=message):
        load_run_config(None, overrides)
