"""The settings of every service, for docs/configuration.md (`make docs`)."""

from __future__ import annotations

from etude.common.settings import EtudeSettings, reference_markdown
from etude.environment.config import EnvironmentSettings
from etude.gateway.config import GatewaySettings
from etude.inference.config import InferenceSettings
from etude.reward.config import RewardSettings
from etude.rollout.config import RolloutSettings
from etude.search.config import SearchSettings

ALL_SETTINGS = (
    EtudeSettings,
    InferenceSettings,
    SearchSettings,
    EnvironmentSettings,
    RewardSettings,
    RolloutSettings,
    GatewaySettings,
)


def configuration_markdown() -> str:
    return reference_markdown(*ALL_SETTINGS)


if __name__ == "__main__":
    print(configuration_markdown(), end="")
