"""Which run's policy an engine serves. One stack may hold several runs, but an engine holds
one policy: a second run's weights would silently replace the first's mid-run, and both
would then train on samples of the other's policy. So the first run to send weights owns
the engine, and another run's update is refused while the owner is alive in the run
registry (`RunRegistry.is_alive`: not ended, its driver's heartbeat fresh). Once the owner
has ended (or its driver died and the reaper would end it), the next run takes the engine
over. Two runs at once need an inference service each (another stack, another release).

An update that names no run (a benchmark, a tool) is a claim by nobody: accepted on an
engine no live run owns, refused on one that a live run does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from etude.inference.types import PolicyOwnedError

log = logging.getLogger(__name__)

RunAlive = Callable[[str], Awaitable[bool]]


async def never_alive(run_id: str) -> bool:
    """For engines in one process with their trainer (the simulated fleet, tests): nothing
    else can update them, so any claim is taken."""
    return False


class PolicyOwnership:
    def __init__(self, run_alive: RunAlive = never_alive) -> None:
        self.run_alive = run_alive
        self.run_id = ""
        """The run whose weights are served; empty: the weights the engine started with,
        or an update that named no run."""

    async def check(self, run_id: str) -> None:
        """Before loading `run_id`'s weights (under the engine's update lock):
        PolicyOwnedError while another live run owns the engine; `loaded` once they are in."""
        owner = self.run_id
        if not owner or owner == run_id:
            return
        try:
            alive = await self.run_alive(owner)
        except Exception as error:  # the registry is unreachable: keep the live run's policy
            raise PolicyOwnedError(
                f"this engine serves run {owner}'s policy and whether that run has ended "
                f"cannot be checked ({type(error).__name__}: {error}); "
                f"{_claimant(run_id)}'s weights are refused"
            ) from error
        if alive:
            raise PolicyOwnedError(
                f"this engine serves run {owner}'s policy and that run is still going; "
                f"{_claimant(run_id)}'s weights are refused: give each concurrent run an "
                f"inference service of its own (another stack or release), or stop run {owner}"
            )
        log.info("run %s has ended; %s takes this engine over", owner, _claimant(run_id))

    def loaded(self, run_id: str) -> None:
        self.run_id = run_id


def _claimant(run_id: str) -> str:
    return f"run {run_id}" if run_id else "an update naming no run"
