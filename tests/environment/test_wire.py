"""A tool result and the tool catalog cross the wire in one conversion each way, every field
intact."""

from __future__ import annotations

import pytest

from etude.environment.tools import tool_catalog
from etude.environment.types import ExecutedCall, ToolOutput
from etude.environment.wire import (
    catalog_from_proto,
    catalog_to_proto,
    result_from_proto,
    result_to_proto,
)


@pytest.mark.parametrize(
    "output",
    [ToolOutput("ok"), ToolOutput("cut", 124, True, 7, "timeout", ends_episode=True)],
)
def test_a_result_comes_back_from_the_wire_as_it_went(output: ToolOutput) -> None:
    executed = ExecutedCall("call_2", "run_terminal_command", output, 1.25)
    assert result_from_proto(result_to_proto(executed)) == executed


def test_the_tool_catalog_comes_back_from_the_wire_as_it_went() -> None:
    catalog = tool_catalog()
    assert catalog_from_proto(catalog_to_proto(catalog)) == catalog
