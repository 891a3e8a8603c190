"""A tool result crosses the wire in one conversion each way, every field intact."""

from __future__ import annotations

import pytest

from etude.environment.types import ExecutedCall, ToolOutput
from etude.environment.wire import result_from_proto, result_to_proto


@pytest.mark.parametrize(
    "output",
    [ToolOutput("ok"), ToolOutput("cut", 124, True, 7, "timeout", ends_episode=True)],
)
def test_a_result_comes_back_from_the_wire_as_it_went(output: ToolOutput) -> None:
    executed = ExecutedCall("call_2", "run_terminal_command", output, 1.25)
    assert result_from_proto(result_to_proto(executed)) == executed
