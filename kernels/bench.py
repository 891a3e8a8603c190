"""MXFP8 kernel benchmark: quantize bandwidth against the device's copy bandwidth, dense and
grouped GEMM throughput against torch's bf16 GEMMs, at MoE shapes.

On a GPU (CUDA): `quantize_gbps` is bytes moved (bf16 in, fp8 + scales out, rowwise and
colwise in one launch: `mode="dual"`) per second on a [tokens, hidden] activation;
`copy_gbps` is `torch.clone` of the same tensor (read + write). `gemm_tflops_*` is the
forward of one expert-FFN-shaped GEMM over all tokens (M = tokens, K = hidden, N = FFN):
MXFP8 (`mx_gemm`, each path) against `torch.mm` in bf16. `grouped_tflops_*` is the MoE
forward's grouped GEMM (tokens × top-k rows spread over E experts, uneven but seeded):
`mx_grouped_gemm` against `torch._grouped_mm` in bf16. Times come from
`triton.testing.do_bench` (median); operands are quantized beforehand (the GEMM alone).

On the CPU: `--quick` runs every kernel and path once, small, under the Triton interpreter
and checks it against the reference (SQNR ≥ 80 dB against the dequantized oracle, bit-exact
quantize); it reports no speeds.

    python kernels/bench.py --quick --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

if not torch.cuda.is_available():  # before the kernel modules are imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

from etude.kernels import mx_reference as ref
from etude.kernels.mx_gemm import PATHS, mx_gemm, mx_grouped_gemm
from etude.kernels.mx_quantize import mx_quantize, mx_quantize_experts

TOKENS = 16_384
TOP_K = 8
SHAPES = [(2048, 768), (4096, 1536)]  # (hidden, expert FFN)
EXPERTS = [8, 32, 128]
# A timed GEMM's bf16 output against the fp32 oracle: bf16 rounding alone caps the SQNR near
# 50 dB, a wrong kernel scores near 0.
MIN_SQNR_DB = 40.0


def metric(value, unit, baseline=None, target=None) -> dict:
    entry = {"value": round(value, 4), "unit": unit}
    if baseline is not None:
        entry["baseline"] = round(baseline, 4)
    if target is not None:
        entry["target"] = target
    return entry


def uneven_offsets(rows: int, experts: int, device) -> torch.Tensor:
    weights = torch.rand(experts, generator=torch.Generator().manual_seed(experts)) + 0.5
    sizes = (weights / weights.sum() * rows).floor().long()
    sizes[-1] += rows - sizes.sum()
    return sizes.cumsum(0).to(torch.int32).to(device)


def same_bytes(
    got: tuple[torch.Tensor, torch.Tensor], want: tuple[torch.Tensor, torch.Tensor]
) -> bool:
    """Whether two MXFP8 (data, scales) pairs are equal bit for bit."""
    return torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8)) and torch.equal(
        got[1], want[1]
    )


def cpu_checks() -> dict:
    """Every kernel and path once, small, in the interpreter, against the reference."""
    torch.manual_seed(0)
    x, w = torch.randn(96, 128), torch.randn(64, 128)
    checks = {}
    for mode in ("rowwise", "colwise"):
        expected = (ref.quantize_rowwise if mode == "rowwise" else ref.quantize_colwise)(
            x.bfloat16()
        )
        exact = same_bytes(mx_quantize(x.bfloat16(), mode=mode), expected)
        checks[f"quantize_{mode}_bit_exact"] = metric(float(exact), "bool", target=1)
    a, b = ref.quantize_rowwise(x), ref.quantize_rowwise(w)
    oracle = ref.mx_gemm(a, b)
    for path in PATHS:
        got = mx_gemm(*a, *b, out_dtype=torch.float32, path=path)
        checks[f"gemm_sqnr_db_{path}"] = metric(ref.sqnr_db(oracle, got), "dB", target=80)
    experts = torch.randn(4, 64, 128)
    offsets = torch.tensor([20, 20, 70, 96], dtype=torch.int32)
    b3 = mx_quantize_experts(experts, along="K")
    oracle = ref.mx_grouped_gemm(a, b3, offsets)
    for path in PATHS:
        got = mx_grouped_gemm(*a, *b3, offsets, out_dtype=torch.float32, path=path)
        checks[f"grouped_sqnr_db_{path}"] = metric(ref.sqnr_db(oracle, got), "dB", target=80)
    return checks


def timed_path(run, oracle: torch.Tensor, name: str) -> tuple[float | None, float]:
    """(median ms, SQNR dB) of `run`, timed only where its result matches the oracle (a timed
    call that computes garbage is not a speed); a path the device cannot compile or run is
    reported, not fatal."""
    from triton.testing import do_bench

    try:
        quality = ref.sqnr_db(oracle, run().float())
        if quality < MIN_SQNR_DB:
            print(f"{name}: wrong result ({quality:.1f} dB), not timed")
            return None, quality
        return do_bench(run), quality
    except Exception as error:
        print(f"{name}: {error!r}")
        return None, float("nan")


def grouped_tflops(a_hp: torch.Tensor, ffn: int, experts: int, metrics: dict, tag: str) -> None:
    """MXFP8 (each path) against bf16 TFLOP/s of the MoE forward's grouped GEMM on `a_hp`."""
    from triton.testing import do_bench

    rows, hidden = a_hp.shape
    w_hp = torch.randn(experts, ffn, hidden, device=a_hp.device, dtype=torch.bfloat16)
    offsets = uneven_offsets(rows, experts, a_hp.device)
    a, w = mx_quantize(a_hp), mx_quantize_experts(w_hp)
    flops = 2 * rows * hidden * ffn
    bf16_ms = do_bench(lambda: torch._grouped_mm(a_hp, w_hp.transpose(-2, -1), offs=offsets))
    bf16 = flops / bf16_ms / 1e9
    metrics[f"grouped_tflops_bf16_{tag}"] = metric(bf16, "TFLOP/s")
    oracle = ref.mx_grouped_gemm(a, w, offsets)
    for path in PATHS:
        ms, quality = timed_path(lambda path=path: mx_grouped_gemm(*a, *w, offsets, path=path),
                                 oracle, f"mx_grouped_gemm {path} {tag}")  # fmt: skip
        metrics[f"grouped_sqnr_db_{path}_{tag}"] = metric(quality, "dB", target=MIN_SQNR_DB)
        if ms is not None:
            metrics[f"grouped_tflops_mx_{path}_{tag}"] = metric(
                flops / ms / 1e9, "TFLOP/s", baseline=bf16, target=0.9 * bf16
            )


def gpu_benchmarks(quick: bool) -> dict:
    from triton.testing import do_bench

    device = "cuda"
    torch.manual_seed(0)
    tokens = TOKENS // 4 if quick else TOKENS
    shapes = SHAPES[:1] if quick else SHAPES
    metrics = {}
    x = torch.randn(tokens, shapes[-1][0], device=device, dtype=torch.bfloat16)
    moved = x.numel() * 2 + 2 * (x.numel() + x.numel() // 32)  # bf16 in; 2 × (fp8 + scales)
    (row, col) = mx_quantize(x, mode="dual")
    exact = same_bytes(row, ref.quantize_rowwise(x)) and same_bytes(col, ref.quantize_colwise(x))
    metrics["quantize_dual_bit_exact"] = metric(float(exact), "bool", target=1)
    copy_gbps = 2 * x.numel() * 2 / do_bench(lambda: x.clone()) / 1e6
    metrics["copy_gbps"] = metric(copy_gbps, "GB/s")
    if exact:
        quantize_ms = do_bench(lambda: mx_quantize(x, mode="dual"))
        metrics["quantize_gbps"] = metric(
            moved / quantize_ms / 1e6, "GB/s", baseline=copy_gbps, target=0.7 * copy_gbps
        )
    else:
        print("mx_quantize differs from the reference on this device: not timed")
    for hidden, ffn in shapes:
        a_hp = torch.randn(tokens, hidden, device=device, dtype=torch.bfloat16)
        w_hp = torch.randn(ffn, hidden, device=device, dtype=torch.bfloat16)
        flops = 2 * tokens * hidden * ffn
        bf16 = flops / do_bench(lambda a_hp=a_hp, w_hp=w_hp: a_hp @ w_hp.t()) / 1e9
        a, w = mx_quantize(a_hp), mx_quantize(w_hp)
        tag = f"{hidden}x{ffn}"
        metrics[f"gemm_tflops_bf16_{tag}"] = metric(bf16, "TFLOP/s")
        oracle = ref.mx_gemm(a, w)
        for path in PATHS:
            ms, quality = timed_path(lambda a=a, w=w, path=path: mx_gemm(*a, *w, path=path),
                                     oracle, f"mx_gemm {path} {tag}")  # fmt: skip
            metrics[f"gemm_sqnr_db_{path}_{tag}"] = metric(quality, "dB", target=MIN_SQNR_DB)
            if ms is not None:
                metrics[f"gemm_tflops_mx_{path}_{tag}"] = metric(
                    flops / ms / 1e9, "TFLOP/s", baseline=bf16, target=0.9 * bf16
                )
        rows = tokens * TOP_K
        a_rows_hp = torch.randn(rows, hidden, device=device, dtype=torch.bfloat16)
        for experts in EXPERTS[:1] if quick else EXPERTS:
            grouped_tflops(a_rows_hp, ffn, experts, metrics, f"{tag}_e{experts}")
    # The keys the issue names: the largest shape's figures (the default path).
    last = f"{shapes[-1][0]}x{shapes[-1][1]}"
    grouped = f"{last}_e{(EXPERTS[:1] if quick else EXPERTS)[-1]}"
    aliases = {
        "gemm_tflops_mx": f"gemm_tflops_mx_dequant_{last}",
        "gemm_tflops_bf16": f"gemm_tflops_bf16_{last}",
        "grouped_tflops_mx": f"grouped_tflops_mx_dequant_{grouped}",
        "grouped_tflops_bf16": f"grouped_tflops_bf16_{grouped}",
    }
    metrics.update({key: metrics[source] for key, source in aliases.items() if source in metrics})
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run, under a minute")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    metrics = gpu_benchmarks(args.quick) if gpu else cpu_checks()
    device = torch.cuda.get_device_name() if gpu else "cpu (Triton interpreter)"
    width = max(map(len, metrics))
    print(f"MXFP8 kernels on {device}")
    for key, entry in metrics.items():
        extra = f"  (baseline {entry['baseline']})" if "baseline" in entry else ""
        print(f"{key:<{width}}  {entry['value']:>12} {entry['unit']}{extra}")
    if args.json:
        document = {"benchmark": "mxfp8_kernels", "metrics": metrics, "device": device,
                    "quick": args.quick}  # fmt: skip
        args.json.write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
