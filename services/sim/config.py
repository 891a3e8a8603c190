"""Settings of a simulated backend (`ETUDE_SIM__*`): the inference, environment and reward
services read them when their backend is `sim`."""

from __future__ import annotations

from pydantic import Field

from etude.common.settings import Section
from etude.sim.clock import SimClock, shared_clock
from etude.sim.scenario import Scenario, load_scenario


class SimConfig(Section):
    scenario: str = "default"
    """A bundled scenario (`default`) or a scenario YAML file (etude.sim.scenario)."""
    time_scale: float | None = Field(default=None, gt=0, le=1e6)
    """Simulated seconds per real second; unset: the scenario's."""

    def load(self) -> tuple[Scenario, SimClock]:
        """The scenario, and the process's clock at its time scale (`shared_clock`): every
        sim part a process builds from these settings waits on that one clock."""
        overrides = {} if self.time_scale is None else {"time_scale": self.time_scale}
        scenario = load_scenario(self.scenario, **overrides)
        return scenario, shared_clock(scenario.time_scale)
