"""Behaviour metrics and the efficiency-aware reward: turns parsed by the real parser with
results as the environment writes them, batches of trajectories with known shares, and
whole episodes through the agent loop on a real environment session and the real grader."""

from __future__ import annotations

import pytest

from etude.common.payloads import Trajectory
from etude.common.toolcalls import ToolCall, parse_tool_calls, render_tool_calls, tools_by_name
from etude.environment.tools import tool_specs
from etude.environment.types import ExecutedCall, ToolOutput
from etude.rollout.behaviour import EpisodeBehaviour, malformed_blocks, workspace_path
from etude.rollout.trajectory import shaped_reward
from etude.rollout.types import behaviour_summary
from tests.rollout.test_agent import REQUEST, TASK, TOKENIZER, TextTurns, cache, runner  # noqa: F401
from tests.tasks.conftest import bwrap  # noqa: F401

TOOLS = tools_by_name(tool_specs())
FILE = "calcparse/evaluator.py"
# TASK's bug and its fix, as edit_file quotes them.
_LIMIT = "builtin.max_args is not None and count > builtin.max_args"
BUGGY = f"        if count < builtin.min_args and {_LIMIT}:\n"
FIXED = f"        if count < builtin.min_args or ({_LIMIT}):\n"


def call(name: str, **arguments: str) -> str:
    return render_tool_calls([ToolCall(name, arguments)])


def batch(*calls: str) -> str:
    return "I look around first.\n" + "\n".join(calls)


def executed(call: ToolCall, exit_code: int = 0, error_reason: str | None = None) -> ExecutedCall:
    """A result as the environment returns it: failures carry an exit code and a reason."""
    text = f"{call.name} failed" if error_reason else f"{call.name} output"
    output = ToolOutput(
        text, exit_code, error_reason=error_reason, ends_episode=call.name == "submit"
    )
    return ExecutedCall(call.id, call.name, output, 0.01)


def play(behaviour: EpisodeBehaviour, text: str, failures: dict[str, str] | None = None):
    """Parse a turn as the loop does and observe it with results; `failures` maps a call
    id to the error reason the environment gave it."""
    parsed = parse_tool_calls(text, tools=TOOLS)
    failures = failures or {}
    results = [
        executed(c, 1, failures[c.id]) if c.id in failures else executed(c) for c in parsed.calls
    ]
    behaviour.observe(parsed.calls, parsed.errors, results)
    return parsed


# -- one episode -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written",
    ["a.py", "./a.py", "/workspace/a.py", " a.py\n", "pkg/../a.py", "/workspace/./a.py"],
)
def test_the_forms_of_a_workspace_path_are_one_file(written):
    assert workspace_path(written) == "a.py"


def test_the_workspace_root_and_paths_outside_it_keep_their_identity():
    assert workspace_path("/workspace") == workspace_path("./") == "."
    assert workspace_path("/etc/passwd") == "/etc/passwd"
    assert workspace_path("/workspace-other/a.py") == "/workspace-other/a.py"


def test_an_edit_is_blind_unless_an_earlier_turn_read_the_same_file():
    behaviour = EpisodeBehaviour()
    # Read and edit in one batch: the edit was written before the read's result was seen.
    edit = call("edit_file", path="pkg/calc.py", old_string="a", new_string="b")
    play(behaviour, batch(call("read_file", path="./pkg/calc.py"), edit))
    assert (behaviour.edits, behaviour.blind_edits) == (1, 1)
    # The next turn has seen it, under any spelling of the path.
    play(
        behaviour, call("edit_file", path="/workspace/pkg/calc.py", old_string="b", new_string="c")
    )
    assert (behaviour.edits, behaviour.blind_edits) == (2, 1)
    # grep shows lines, not the file: an edit of a file only grepped is blind.
    play(behaviour, call("grep", pattern="def", path="pkg/util.py"))
    play(behaviour, call("edit_file", path="pkg/util.py", old_string="x", new_string="y"))
    assert (behaviour.edits, behaviour.blind_edits) == (3, 2)


def test_a_failed_read_shows_nothing_so_the_edit_after_it_is_blind():
    behaviour = EpisodeBehaviour()
    play(behaviour, call("read_file", path="pkg/new.py"), failures={"call_0": "not_found"})
    play(behaviour, call("edit_file", path="pkg/new.py", old_string="x", new_string="y"))
    assert (behaviour.valid_calls, behaviour.edits, behaviour.blind_edits) == (2, 1, 1)


def test_reads_before_the_first_edit_count_read_and_search_calls_in_call_order():
    behaviour = EpisodeBehaviour()
    play(behaviour, batch(call("list_dir", path="."), call("grep", pattern="add"),
                          call("run_terminal_command", command="ls")))  # fmt: skip
    assert behaviour.reads_before_first_edit is None  # no edit yet
    play(behaviour, batch(call("file_search", glob="*.py"), call("codebase_search", query="add"),
                          call("read_file", path="pkg/calc.py"),
                          call("edit_file", path="pkg/calc.py", old_string="a", new_string="b"),
                          call("read_file", path="pkg/calc.py")))  # fmt: skip
    play(behaviour, call("read_file", path="pkg/other.py"))
    play(behaviour, call("edit_file", path="pkg/calc.py", old_string="b", new_string="c"))
    # list_dir, grep, file_search, codebase_search, read_file; the shell is not a read, and
    # reads after the first edit do not move it.
    assert behaviour.reads_before_first_edit == 5
    assert behaviour.edits == 2


def test_malformed_calls_are_failed_blocks_stray_tags_and_refused_arguments():
    behaviour = EpisodeBehaviour()
    turn = "\n".join([
        # one block, two problems: one malformed call
        "<tool_call>\n<function=read_file>\n<parameter=paht>\nx\n</parameter>\n</function>\n"
        "</tool_call>",
        "<tool_call>\n<function=grep>\n</tool_call>",  # unclosed function
        "a stray </tool_call> in the prose",
        call("read_file", path="pkg/calc.py", start_line="one"),  # the environment refuses it
        call("list_dir", path="."),
    ])  # fmt: skip
    parsed = play(behaviour, turn, failures={"call_2": "bad_argument"})
    assert [(c.id, c.name) for c in parsed.calls] == [
        ("call_2", "read_file"),
        ("call_3", "list_dir"),
    ]
    assert malformed_blocks(parsed.errors) == 3 and len(parsed.errors) == 4
    assert (behaviour.malformed_calls, behaviour.valid_calls) == (4, 1)
    # A call that ran and failed on the repository is a valid call, not a malformed one.
    play(behaviour, call("read_file", path="missing.py"), failures={"call_0": "not_found"})
    assert (behaviour.malformed_calls, behaviour.valid_calls) == (4, 2)


def test_a_refused_edit_is_malformed_not_an_edit():
    behaviour = EpisodeBehaviour()
    same = call("edit_file", path="a.py", old_string="x", new_string="x")
    play(behaviour, same, failures={"call_0": "bad_argument"})
    assert (behaviour.edits, behaviour.malformed_calls, behaviour.reads_before_first_edit) == (
        0,
        1,
        None,
    )


# -- a batch of trajectories -------------------------------------------------------------------


def trajectory(
    calls_per_turn: list[int],
    reason: str = "submitted",
    sampled: int = 10,
    **behaviour: int | None,
) -> Trajectory:
    mask = [0] * 5 + [1] * sampled
    return Trajectory(
        run_id="r", task_id="t", group_id="g", sample_index=0, token_ids=[1] * len(mask),
        logprobs=[0.0] * len(mask), policy_versions=[-1] * len(mask), loss_mask=mask,
        reward=0.0, turns=len(calls_per_turn), calls_per_turn=calls_per_turn,
        finish_reason=reason, **behaviour,
    )  # fmt: skip


def test_the_summary_of_a_batch_has_the_known_shares_and_means():
    batch_ = [
        trajectory([3, 1, 2, 1], sampled=100, valid_calls=6, malformed_calls=2, edits=2,
                   blind_edits=1, reads_before_first_edit=3),
        trajectory([1, 0], "no_tool_call", sampled=40, valid_calls=1, malformed_calls=0),
        trajectory([2, 2, 1, 1], "max_turns", sampled=60, valid_calls=5, malformed_calls=1,
                   edits=2, blind_edits=2, reads_before_first_edit=0),
    ]  # fmt: skip
    summary = behaviour_summary(batch_)
    assert summary == pytest.approx(
        {
            "tool_calls_per_turn": 14 / 10,
            "parallel_share": 4 / 10,  # turns with 3, 2, 2, 2 calls
            "reads_before_first_edit": (3 + 0) / 2,  # the episode without an edit left out
            "blind_edit_rate": 3 / 4,
            "turns_per_episode": 10 / 3,
            "generated_tokens_per_episode": 200 / 3,
            "malformed_rate": 3 / 15,
            "finish_submitted": 1 / 3,
            "finish_no_tool_call": 1 / 3,
            "finish_max_turns": 1 / 3,
            "finish_max_tokens": 0.0,
            "finish_timeout": 0.0,
        }
    )


def test_ratios_without_a_denominator_are_left_out_not_reported_as_zero():
    summary = behaviour_summary([trajectory([0], "no_tool_call", sampled=7)])
    assert summary["turns_per_episode"] == 1 and summary["tool_calls_per_turn"] == 0
    for undefined in ("reads_before_first_edit", "blind_edit_rate", "malformed_rate"):
        assert undefined not in summary
    assert behaviour_summary([]) == {}
    # A reason the code does not know yet still gets its share.
    assert behaviour_summary([trajectory([1], "cancelled")])["finish_cancelled"] == 1.0


# -- the efficiency-aware reward ---------------------------------------------------------------


def turned(correctness: float, turns: int, cost: float) -> tuple[float, float]:
    reward, taken = shaped_reward(correctness, {"turn_cost": cost * turns})
    return reward, taken["turn_cost"]


def test_turn_cost_zero_leaves_every_reward_as_the_reward_service_gave_it():
    for correctness in (1.0, 0.0, 0.37, -0.5, -3.0):
        for turns in (0, 1, 6, 1000):
            assert turned(correctness, turns, 0.0) == (correctness, 0.0)


def test_with_a_turn_cost_fewer_turns_earn_more_and_the_floor_bounds_the_deduction():
    assert turned(1.0, 2, 0.1)[0] > turned(1.0, 4, 0.1)[0]
    assert turned(1.0, 4, 0.1) == pytest.approx((0.6, 0.4))
    assert turned(0.0, 30, 0.1) == pytest.approx((-1.0, 1.0))  # floored
    assert turned(-2.0, 5, 0.1) == (-2.0, 0.0)  # already below the floor
    with pytest.raises(ValueError, match="must not be negative"):
        turned(1.0, 3, -0.1)


def test_where_the_floor_bounds_several_costs_each_is_scaled_by_the_same_factor():
    reward, taken = shaped_reward(0.5, {"turn_cost": 1.2, "malformed_cost": 0.6})
    assert reward == -1.0
    assert taken == pytest.approx({"turn_cost": 1.0, "malformed_cost": 0.5})
    assert sum(taken.values()) == pytest.approx(0.5 - reward)


# -- through the agent loop ------------------------------------------------------------------


@pytest.mark.integration
async def test_an_episode_records_its_behaviour_through_the_loop(runner):  # noqa: F811
    turns = TextTurns(
        # A parallel batch of three reads, the file under a ./ spelling.
        batch(call("list_dir", path="."), call("read_file", path=f"./{FILE}"),
              call("grep", pattern="def call", path="calcparse")),
        # A broken block, then the fix: not blind, the file was read in the first turn.
        "<tool_call>\n<function=read_file>\n</tool_call>\n"
        + call("edit_file", path=FILE, old_string=BUGGY, new_string=FIXED),
        # An edit of a file never read (it fails to match, the fix stays intact) and a read
        # the environment refuses for a bad argument.
        batch(call("edit_file", path="calcparse/__init__.py", old_string="no such text",
                   new_string="x"),
              call("read_file", path=FILE, start_line="first")),
        call("submit", message="fixed"),
    )  # fmt: skip
    trajectory = await runner(max_turns=6, max_episode_tokens=8192).run(REQUEST, TASK, turns)
    assert trajectory.finish_reason == "submitted" and trajectory.correctness == 1.0
    assert trajectory.calls_per_turn == [3, 1, 2, 1]
    assert (trajectory.valid_calls, trajectory.malformed_calls) == (6, 2)
    assert (trajectory.edits, trajectory.blind_edits) == (2, 1)
    assert trajectory.reads_before_first_edit == 3
    summary = behaviour_summary([trajectory])
    assert summary["parallel_share"] == 0.5
    assert summary["malformed_rate"] == 2 / 8
    assert summary["blind_edit_rate"] == 0.5
    assert summary["generated_tokens_per_episode"] == sum(trajectory.loss_mask) > 0
    assert summary["finish_submitted"] == 1.0


def solving_turns(*wasted: str) -> TextTurns:
    """Read, fix, submit: TASK solved, after the turns given (which change nothing)."""
    return TextTurns(
        *wasted,
        call("read_file", path=FILE, start_line="157", end_line="177"),
        call("edit_file", path=FILE, old_string=BUGGY, new_string=FIXED),
        call("submit", message="fixed"),
    )


@pytest.mark.integration
async def test_same_correctness_fewer_turns_earn_more_and_no_cost_changes_nothing(runner):  # noqa: F811
    costly = runner(max_episode_tokens=8192, turn_cost=0.05)
    short = await costly.run(REQUEST, TASK, solving_turns())
    long = await costly.run(REQUEST, TASK, solving_turns(call("list_dir", path=".")))
    assert short.correctness == long.correctness == 1.0
    assert (short.turns, long.turns) == (3, 4)
    assert short.reward > long.reward
    assert short.reward == pytest.approx(1.0 - 0.05 * short.turns)
    assert long.reward_components["turn_cost"] == pytest.approx(0.05 * long.turns)
    free = await runner(max_episode_tokens=8192).run(REQUEST, TASK, solving_turns())
    assert free.reward == 1.0
    assert (free.reward_components["correctness"], free.reward_components["turn_cost"]) == (
        1.0,
        0.0,
    )
    assert (short.reads_before_first_edit, short.blind_edits, short.edits) == (1, 0, 1)
    assert long.reads_before_first_edit == 2


@pytest.mark.integration
async def test_a_malformed_cost_makes_a_solved_episode_with_broken_calls_earn_less(runner):  # noqa: F811
    garbled = "<tool_call>\n<function=read_file>\n</tool_call>\n"  # no path: rejected
    strict = runner(max_episode_tokens=8192, malformed_cost=0.1)
    clean = await strict.run(REQUEST, TASK, solving_turns())
    broken = await strict.run(REQUEST, TASK, solving_turns(garbled + garbled))
    assert clean.correctness == broken.correctness == 1.0
    assert (clean.malformed_calls, broken.malformed_calls) == (0, 2)
    assert clean.reward == 1.0
    assert broken.reward == pytest.approx(1.0 - 0.2)
    assert broken.reward_components["malformed_cost"] == pytest.approx(0.2)
    lenient = await runner(max_episode_tokens=8192).run(
        REQUEST, TASK, solving_turns(garbled + garbled)
    )
    assert lenient.reward == 1.0 and lenient.reward_components["malformed_cost"] == 0.0
