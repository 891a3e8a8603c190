"""The engines a rollout worker routes among: `ETUDE_SERVICES__INFERENCE` entries, each name
resolved to every address it has; a new engine joins without taking requests until it
serves the current version."""

from __future__ import annotations

import pytest

from etude.inference.local import InProcessInference
from etude.inference.sim_backend import SimBackend
from etude.rollout.engines import resolve, split_entries
from etude.rollout.router import Router
from etude.sim.clock import SimClock
from etude.sim.scenario import Scenario


def test_entries_are_host_port_pairs_and_bad_ones_say_so():
    assert split_entries("a:1, b:2,") == [("a", 1), ("b", 2)]
    assert split_entries("[::1]:50051") == [("::1", 50051)]
    for bad in ("", "no-port", "host:", ":80", "host:http"):
        with pytest.raises(ValueError):
            split_entries(bad)


def test_a_name_resolves_to_every_address_it_has():
    assert resolve("127.0.0.1:5000,127.0.0.2:5001") == ["127.0.0.1:5000", "127.0.0.2:5001"]
    assert resolve("127.0.0.1:5000,127.0.0.1:5000") == ["127.0.0.1:5000"]
    assert "127.0.0.1:7000" in resolve("localhost:7000")
    assert resolve("no-such-host.invalid:5000") == []


async def test_an_engine_that_joins_takes_requests_only_once_it_serves_the_current_version():
    clock = SimClock(100)
    first, joining = (InProcessInference(SimBackend(Scenario(), clock)) for _ in range(2))
    await first.update_weights(2, [])
    router = Router([first], names=["first"])
    try:
        await router.refresh()
        router.add_engine("joining", joining)
        with pytest.raises(ValueError, match="already"):
            router.add_engine("joining", joining)
        await router.refresh()
        assert [e.name for e in router.engines if e.admitted] == ["first"]
        await joining.update_weights(2, [])
        await router.refresh()
        assert [e.name for e in router.engines if e.admitted] == ["first", "joining"]
        assert router.remove_engine("first") is first
        assert router.names == ["joining"]
    finally:
        await router.close()
        await first.close()
        await joining.close()
