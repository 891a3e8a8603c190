"""Peak memory of a local training run: `etude train` with the stack it starts, measured as
a newcomer's machine would see it.

- The run: `make run`'s config (configs/locate-smollm2.yaml) in a fresh run directory, the
  page cache dropped first (root) so vLLM and the model load from disk. `--quick` shortens
  it to 4 SFT steps, one RL step and 4 held-out tasks: every phase runs (warm start, a full
  weight publish, evaluation, rollouts, a partial publish) in about 9 minutes, with the
  make run's sizes (KV cache, concurrency, micro-batch), so its peak is make run's peak
  phase by phase; the full run is make run itself.
- Memory: the proportional set size (PSS) of every process of `etude train`'s tree, summed,
  sampled twice a second. PSS splits a page shared by several processes (forked
  demonstration writers, shared libraries) among them; a sum of resident sets counts it
  once per process.
- `peak_gib` (target 12 GiB on the README's 24 GiB machine), with `estimate_gib`, what
  `etude train` estimates before it starts (etude.cli.memory_budget), as its baseline;
  `peak_gib_<process>`: each process's own peak. The run must end with exit code 0 and no
  process of its tree left, or the benchmark fails.

    sudo python loadtests/run_memory.py --quick --json out.json
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from benchlib import argument_parser, metric, print_metrics, write_json

from etude.cli.memory_budget import GIB, run_need
from etude.common.run_config import load_run_config
from etude.inference.config import InferenceConfig
from etude.sandbox.procs import stat_fields, subtree
from etude.trainer.driver import serving_env

REPO = Path(__file__).resolve().parents[1]
MAKE_RUN_CONFIG = REPO / "configs" / "locate-smollm2.yaml"
QUICK = {"sft": {"steps": 4}, "trainer": {"steps": 1},
         "tasks": {"eval_limit": 4, "eval_samples": 1}}  # fmt: skip
TARGET_GIB = 12.0


def pss_and_name(pid: int) -> tuple[int, str] | None:
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    pss = next(int(line.split()[1]) * 1024 for line in rollup.splitlines()
               if line.startswith("Pss:"))  # fmt: skip
    return pss, process_name([c.decode(errors="replace") for c in command if c])


def process_name(argv: list[str]) -> str:
    """`trainer` (etude train itself), `inference`, `vllm_engine`, `redis`, ..."""
    text = " ".join(argv)
    if "EngineCore" in text:
        return "vllm_engine"
    if "redis-server" in text:
        return "redis"
    if "train" in argv:  # `python -m etude.cli train …`
        return "trainer"
    if "-m" in argv and argv.index("-m") + 1 < len(argv):
        return argv[argv.index("-m") + 1].removeprefix("etude.").replace(".", "_")
    return "other"


def start_time(pid: int) -> str | None:
    """Tells a process from a later one that reuses its pid."""
    try:
        return stat_fields(pid)[19]
    except (OSError, IndexError):
        return None


def measure(argv: list[str], env: dict[str, str], log: Path) -> tuple[int, float, dict, list]:
    """Run `argv`: its exit code, the tree's peak PSS, each process kind's peak, and the
    processes of its tree still alive 10 s after it exited."""
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    peak, per_kind, seen = 0, {}, {}
    try:
        while proc.poll() is None:
            sizes: dict[str, int] = {}
            for pid in [proc.pid, *subtree(proc.pid)]:
                found = pss_and_name(pid)
                if found:
                    sizes[found[1]] = sizes.get(found[1], 0) + found[0]
                    seen.setdefault(pid, (start_time(pid), found[1]))
            peak = max(peak, sum(sizes.values()))
            for kind, size in sizes.items():
                per_kind[kind] = max(per_kind.get(kind, 0), size)
            time.sleep(0.5)
    finally:
        if proc.poll() is None:  # the measurement failed or was interrupted: end the run too
            proc.send_signal(signal.SIGINT)
            proc.wait()
    time.sleep(10)
    left = [(pid, kind) for pid, (started, kind) in seen.items()
            if started is not None and start_time(pid) == started]  # fmt: skip
    return proc.returncode, peak / GIB, {k: v / GIB for k, v in per_kind.items()}, left


def main() -> None:
    args = argument_parser(__doc__).parse_args()
    if os.geteuid() != 0:
        sys.exit("run_memory needs root: only root can drop the page cache")
    run = load_run_config(MAKE_RUN_CONFIG)
    with tempfile.TemporaryDirectory(prefix="etude-run-memory-") as workdir:
        config = MAKE_RUN_CONFIG
        if args.quick:
            raw = yaml.safe_load(MAKE_RUN_CONFIG.read_text())
            for section, values in QUICK.items():
                raw.setdefault(section, {}).update(values)
            raw["output_dir"] = str(Path(workdir) / "runs")
            config = Path(workdir) / "quick.yaml"
            config.write_text(yaml.safe_dump(raw))
            run = load_run_config(config)
        env = {**os.environ, "ETUDE_STACK__RUN_DIR": str(Path(workdir) / "stack")}
        sizes = serving_env(run, Path(env.get("ETUDE_STACK__MODELS_DIR", REPO / ".etude/models")))
        inference = InferenceConfig(**{k.removeprefix("ETUDE_INFERENCE__").lower(): v
                                       for k, v in sizes.items()})  # fmt: skip
        estimate = run_need(run, inference).total / GIB
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        argv = [sys.executable, "-m", "etude.cli", "train", str(config)]
        log = Path(workdir) / "train.log"
        code, peak, per_kind, left = measure(argv, env, log)
        if code != 0:
            sys.exit(f"etude train exited {code}:\n{log.read_text()[-4000:]}")
        if left:
            sys.exit(f"processes of the run outlived it: {left}")
    metrics = {"peak_gib": metric(peak, "GiB", baseline=estimate, target=TARGET_GIB),
               "estimate_gib": metric(estimate, "GiB")}  # fmt: skip
    for kind, value in sorted(per_kind.items(), key=lambda item: -item[1]):
        metrics[f"peak_gib_{kind}"] = metric(value, "GiB")
    print_metrics(f"Peak memory of etude train ({'quick' if args.quick else 'make run'})", metrics)
    write_json(args.json, "run_memory", metrics, quick=args.quick)


if __name__ == "__main__":
    main()
