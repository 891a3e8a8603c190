"""The `sim` reward: a score after a simulated test run. Whether an episode solved its task
is drawn per session at the scenario's solve rate: the fleet's timing, not learning, is what
a simulation measures. It meets the reward's client interface (`Scorer`, client.py): the
simulated fleet calls it in process, and the reward service serves it over gRPC with
`ETUDE_REWARD__BACKEND=sim`."""

from __future__ import annotations

from etude.reward.types import Score
from etude.sim.clock import SimClock
from etude.sim.scenario import Scenario, seeded


class SimScorer:
    def __init__(self, scenario: Scenario, clock: SimClock) -> None:
        self.scenario = scenario
        self.clock = clock

    async def score(
        self, task_id: str, *, session_id: str = "", patch: str = "", run_id: str = ""
    ) -> Score:
        rng = seeded(self.scenario.seed, task_id, session_id)
        seconds = self.scenario.score_seconds.draw(rng)
        await self.clock.sleep(seconds)
        solved = rng.random() < self.scenario.episodes.solve_rate
        reward = 1.0 if solved else 0.0
        return Score(reward, {"correctness": reward}, seconds=seconds)
