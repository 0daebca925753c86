#!/usr/bin/env python3
"""Where a flashcpp-llm decode step goes: per-op kernel time from one Nsight Compute profile.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \\
        --launch-skip 900 --launch-count 700 flashcpp-llm bench --model M.gguf --no-prefill \\
        --decode-batch 1 --steps 6 --no-graphs > profile.csv
    step_profile.py profile.csv

ncu runs each kernel alone (serialized, caches flushed between kernels), so the sum is the step's kernel time
without launch gaps or overlap. One step is the kernels after one sampling kernel up to and including the next
(every sampled step ends with the sampler). Prints a markdown table and one `LLM_PROFILE {json}` line.
"""
import csv
import json
import sys

# Kernel-name fragments, first match wins; anything else is a cuBLASLt GEMM.
OPS = [
    # The fused decode kernels (decode_linear.hpp), by their DecodeEpilogue template argument.
    ("decode_linear_kernel<__half, 0,", "fused LM head (norm + GEMV)"),
    ("decode_linear_kernel<__half, 1,", "fused o / down projection + residual"),
    ("decode_linear_kernel<__half, 2,", "fused norm + gate/up + SiLU-and-mul"),
    ("decode_linear_kernel<__half, 3,", "fused norm + qkv + RoPE + KV append"),
    ("decode_linear_kernel<__nv_bfloat16, 0,", "fused LM head (norm + GEMV)"),
    ("decode_linear_kernel<__nv_bfloat16, 1,", "fused o / down projection + residual"),
    ("decode_linear_kernel<__nv_bfloat16, 2,", "fused norm + gate/up + SiLU-and-mul"),
    ("decode_linear_kernel<__nv_bfloat16, 3,", "fused norm + qkv + RoPE + KV append"),
    ("gather_rows", "embedding / logit-row gather"),
    ("FusedAddRMSNorm", "fused add + RMSNorm"),
    ("RMSNorm", "RMSNorm"),
    ("Rotary", "RoPE"),
    ("AppendPagedKV", "paged KV append"),
    ("BatchDecode", "attention (batch decode)"),
    ("BatchPrefill", "attention (batch prefill)"),
    ("MergeStates", "attention (merge states)"),
    ("act_and_mul", "SiLU and mul"),
    ("Softmax", "sampler: softmax"),
    ("Sampling", "sampler: top-k"),
]
SAMPLER_END = "Sampling"
UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def op_of(name):
    return next((op for frag, op in OPS if frag in name), "GEMM (cuBLASLt)")


def main():
    rows = []
    with open(sys.argv[1], newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own log lines are not CSV
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ns = float(r["Metric Value"].replace(",", "")) * UNIT_NS[r["Metric Unit"]]
        rows.append((r["Kernel Name"], ns))
    ends = [i for i, (name, _) in enumerate(rows) if SAMPLER_END in name]
    if len(ends) < 2:
        sys.exit(f"{sys.argv[1]}: fewer than two sampling kernels among {len(rows)} profiled: no whole step")
    step = rows[ends[-2] + 1:ends[-1] + 1]
    total = sum(ns for _, ns in step)
    by_op = {}
    for name, ns in step:
        op = by_op.setdefault(op_of(name), {"kernels": 0, "us": 0.0})
        op["kernels"] += 1
        op["us"] += ns / 1e3
    print("| op | kernels | µs | share |\n|---|---|---|---|")
    for op, v in sorted(by_op.items(), key=lambda kv: -kv[1]["us"]):
        print(f"| {op} | {v['kernels']} | {v['us']:.1f} | {100 * v['us'] / (total / 1e3):.0f}% |")
    print(f"| **step** | {len(step)} | {total / 1e3:.1f} | |")
    names = {}
    for name, ns in step:
        n = names.setdefault(name[:120], [0, 0.0])
        n[0] += 1
        n[1] += ns / 1e3
    print("\nkernels by name (count, total µs, mean µs):")
    for name, (k, us) in sorted(names.items(), key=lambda kv: -kv[1][1]):
        print(f"  {k:4d} {us:8.1f} {us / k:6.2f}  {name}")
    print("LLM_PROFILE " + json.dumps({"kernels": len(step), "kernel_us": round(total / 1e3, 1),
                                       "ops": {k: {"kernels": v["kernels"], "us": round(v["us"], 1)}
                                               for k, v in by_op.items()}}))


if __name__ == "__main__":
    main()
