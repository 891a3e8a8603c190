"""What `etude train --cluster` needs before it starts anything: the deployed services'
addresses (etude.trainer.driver.cluster_endpoints)."""

from __future__ import annotations

import pytest

from etude.common.settings import EtudeSettings, ServiceAddresses
from etude.trainer.driver import cluster_endpoints


def settings(**addresses: str) -> EtudeSettings:
    return EtudeSettings(services=ServiceAddresses(**addresses))


def test_the_deployed_services_become_the_run_s_endpoints():
    where = cluster_endpoints(
        settings(environment="env:1", reward="rew:2", inference="inf:3"), 0, ray=False
    )
    assert (where.inference, where.environment, where.reward) == (("inf:3",), "env:1", "rew:2")


def test_ray_engines_stand_in_for_a_deployed_inference():
    where = cluster_endpoints(settings(environment="env:1", reward="rew:2"), 2, ray=True)
    assert where.inference == ()


@pytest.mark.parametrize("addresses, engines, ray, problem", [
    ({"reward": "rew:2", "inference": "inf:3"}, 0, False, "set ETUDE_SERVICES__ENVIRONMENT"),
    ({"environment": "env:1", "reward": "rew:2"}, 0, False, "set ETUDE_SERVICES__INFERENCE"),
    ({"environment": "env:1", "reward": "rew:2"}, 2, False, "--inference-engines needs --ray"),
])  # fmt: skip
def test_what_is_missing_is_named(addresses, engines, ray, problem):
    with pytest.raises(ValueError, match=problem):
        cluster_endpoints(settings(**addresses), engines, ray=ray)
