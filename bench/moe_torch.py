#!/usr/bin/env python3
"""The PyTorch side of the fused-MoE comparison: the same shapes, token counts, routing and FLOP count as
`flashcpp bench-mla-gdn-moe --op moe`, computed the way a PyTorch serving stack without a fused kernel
does it: tokens sorted by expert, then per expert fc1 (a GEMM), swiglu, fc2 (a GEMM), and a weighted
scatter-add back to the tokens. With `torch._grouped_mm` (present in recent PyTorch releases) the per-expert
GEMMs run as one grouped GEMM each; both variants are timed where available.

Timing: CUDA events around each call, 3 warm-up calls, median of --iters. Prints one `MOE_TORCH {json}` line
per case. The weights are random bf16 (about 22 GiB for the DeepSeek-V3 shape).

Usage: python3 bench/moe_torch.py [--tokens 1 16 256 4096] [--iters 20]
"""
import argparse
import json
import statistics

import torch

SHAPES = [  # name, hidden, intermediate, experts, top_k (same as the C++ benchmark)
    ("deepseek-v3 H7168 I2048 E256 top8", 7168, 2048, 256, 8),
    ("mixtral H4096 I14336 E8 top2", 4096, 14336, 8, 2),
]


def route(tokens, experts, top_k, gen):
    """K distinct experts per token, weights 1/K (as the C++ benchmark)."""
    sel = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    return sel.to(torch.int64).cuda(), torch.full((tokens, top_k), 1.0 / top_k, device="cuda")


def sort_by_expert(x, sel, scales, experts):
    flat = sel.reshape(-1)
    order = torch.argsort(flat, stable=True)
    tok = order // sel.shape[1]
    counts = torch.bincount(flat, minlength=experts)
    return x[tok], tok, scales.reshape(-1)[order], counts


def moe_loop(x, w1, w2, sel, scales, inter):
    """Per-expert torch.matmul (the host reads the counts: one synchronisation per call)."""
    xs, tok, ws, counts = sort_by_expert(x, sel, scales, w1.shape[0])
    ys = torch.empty_like(xs)
    start = 0
    for e, n in enumerate(counts.tolist()):
        if n == 0:
            continue
        h = xs[start:start + n] @ w1[e].t()
        ys[start:start + n] = (torch.nn.functional.silu(h[:, inter:]) * h[:, :inter]) @ w2[e].t()
        start += n
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    out.index_add_(0, tok, ys.float() * ws[:, None])
    return out.to(x.dtype)


def moe_grouped(x, w1t, w2t, sel, scales, inter):
    """One torch._grouped_mm per GEMM; w1t = [E, H, 2I], w2t = [E, I, H] (transposed views)."""
    xs, tok, ws, counts = sort_by_expert(x, sel, scales, w1t.shape[0])
    offs = torch.cumsum(counts, 0).to(torch.int32)
    h = torch._grouped_mm(xs, w1t, offs=offs)
    ys = torch._grouped_mm(torch.nn.functional.silu(h[:, inter:]) * h[:, :inter], w2t, offs=offs)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    out.index_add_(0, tok, ys.float() * ws[:, None])
    return out.to(x.dtype)


def time_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 256, 4096])
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(3)
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}")
    for name, hidden, inter, experts, top_k in SHAPES:
        w1 = torch.randn(experts, 2 * inter, hidden, device="cuda", dtype=torch.bfloat16) * 0.02
        w2 = torch.randn(experts, hidden, inter, device="cuda", dtype=torch.bfloat16) * 0.03
        w1t, w2t = w1.transpose(1, 2), w2.transpose(1, 2)
        for tokens in args.tokens:
            x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
            sel, scales = route(tokens, experts, top_k, gen)
            flops = 2.0 * tokens * top_k * (hidden * 2 * inter + inter * hidden)
            variants = {"loop": lambda: moe_loop(x, w1, w2, sel, scales, inter)}
            if hasattr(torch, "_grouped_mm"):
                variants["grouped_mm"] = lambda: moe_grouped(x, w1t, w2t, sel, scales, inter)
            for variant, fn in variants.items():
                try:
                    ms = time_ms(fn, args.iters)
                except (RuntimeError, TypeError) as e:  # an unsupported layout or dtype in this release
                    print(f"{name} T{tokens} {variant}: unavailable ({str(e).splitlines()[0]})")
                    continue
                rec = {"shape": name, "tokens": tokens, "variant": variant, "kernel_ms": round(ms, 4),
                       "tflops": round(flops / (ms * 1e-3) / 1e12, 2)}
                print(f"{name:<36} T{tokens:<5} {variant:<10} {ms:9.3f} ms {rec['tflops']:7.1f} TFLOP/s")
                print("MOE_TORCH " + json.dumps(rec))
        del w1, w2, w1t, w2t
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
