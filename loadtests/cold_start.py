"""How long each service of the local stack takes to start on a cold machine.

- Stack: `etude.cli.stack.LocalStack` with every service `etude up` starts, in a fresh run
  directory; with `--serve-with vllm`, the inference service serves SmolLM2-135M through vLLM
  as `make run` has it (the model imported under `.etude/models` first, before any timing).
- Cold: the page cache dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`, which needs root)
  right before the stack starts, as on a machine that just booted or a fresh clone; warm: the
  same stack started again at once. Every start must succeed, or the benchmark fails.
- `cold_start_s_<service>`: seconds from a service's spawn to its first SERVING health
  check, cold, with the warm start as its baseline; `cold_start_s_stack` for all of them and
  Redis; `cold_over_warm_stack`: how many times longer the cold stack took.

Quick: one cold and one warm start; full: three of each (the slowest cold, the median warm).

    sudo python loadtests/cold_start.py --quick --json out.json
    sudo python loadtests/cold_start.py --serve-with vllm --json out.json
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import argument_parser, ensure_credentials, metric, print_metrics, write_json

from etude.cli.stack import LOCAL_SERVICES, LocalStack, ServiceSpec, settings_for
from etude.common.run_config import load_run_config
from etude.trainer.driver import serving_env

MAKE_RUN_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "locate-smollm2.yaml"


def drop_page_cache() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def start_once(run_dir: Path, cold: bool) -> dict[str, float]:
    """Seconds to SERVING per service (and the whole stack) of one start."""
    stack = LocalStack(settings_for(run_dir), tuple(map(ServiceSpec.module, LOCAL_SERVICES)))
    if cold:
        drop_page_cache()
    started = time.monotonic()
    try:
        state = stack.start()  # StackError, with the service's log, fails the benchmark
        seconds = {c.name: c.ready_seconds for c in state.components if c.kind == "grpc"}
        seconds["stack"] = time.monotonic() - started
    finally:
        stack.stop()
    return seconds


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--serve-with", choices=("torch", "vllm"), default="torch")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("cold_start needs root: only root can drop the page cache")
    if args.serve_with == "vllm":
        run = load_run_config(MAKE_RUN_CONFIG)
        models_dir = settings_for(None).stack.models_dir
        os.environ.update(serving_env(run, models_dir))  # the services inherit it
    repeats = 1 if args.quick else 3
    with tempfile.TemporaryDirectory(prefix="etude-cold-start-") as workdir:
        ensure_credentials(Path(workdir))
        runs = (Path(workdir) / f"run-{i}" for i in range(2 * repeats))
        cold = [start_once(next(runs), cold=True) for _ in range(repeats)]
        warm = [start_once(next(runs), cold=False) for _ in range(repeats)]
    metrics = {}
    for name in [*LOCAL_SERVICES, "stack"]:
        slowest_cold = max(c[name] for c in cold)
        typical_warm = statistics.median(w[name] for w in warm)
        metrics[f"cold_start_s_{name}"] = metric(slowest_cold, "s", baseline=typical_warm)
    stack_cold, stack_warm = (
        max(c["stack"] for c in cold),
        statistics.median(w["stack"] for w in warm),
    )
    metrics["cold_over_warm_stack"] = metric(stack_cold / stack_warm, "x")
    title = f"Local stack start, cold vs warm page cache (inference: {args.serve_with})"
    print_metrics(title, metrics)
    write_json(args.json, "cold_start", metrics, serve_with=args.serve_with, repeats=repeats)


if __name__ == "__main__":
    main()
