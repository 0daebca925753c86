#!/usr/bin/env python3
"""The anchors of `flashcpp bench` on the same machine: the same FlashInfer kernels through FlashInfer's own
Python API (flashinfer-python 0.6.3 + apache-tvm-ffi wheels installed, torch present) and torch equivalents
(F.rms_norm, scaled_dot_product_attention). Same shapes, same method as tools/flashcpp/cmd_bench.cpp:
kernel time = median of CUDA-event pairs around one call after warm-up; host time = median wall time of one
call issued back to back without synchronisation. Prints lines in the format of `flashcpp bench` with an
`impl=` field:

  op name=<op> impl=<flashinfer_python|torch> config=<...> kernel_us=<> [gbps=<>] [tflops=<>] host_us=<>

FlashInfer loads a module from <flashinfer package>/data/aot/<uri>/<uri>.so before it would compile one; modules
built by `flashcpp build` have the same URIs and layout, so `scripts/gpu-check.sh flashinfer-python` links them
there and both sides run the same compiled code (see docs/PERFORMANCE.md, "FlashInfer ops").
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import flashinfer


def measure(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn()
        stops[i].record()
    torch.cuda.synchronize()
    kernel_us = statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, stops))
    host = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return kernel_us, statistics.median(host)


def report(name, impl, config, t, nbytes=0.0, flops=0.0):
    kernel_us, host_us = t
    line = f"op name={name} impl={impl} config={config} kernel_us={kernel_us:.2f}"
    if nbytes:
        line += f" gbps={nbytes / (kernel_us * 1e3):.1f}"
    if flops:
        line += f" tflops={flops / (kernel_us * 1e6):.1f}"
    print(line + f" host_us={host_us:.2f}", flush=True)


def decode_step_ops(m, dev):
    """The decode-step ops with `flashcpp bench`'s shapes and inputs (tools/flashcpp/cmd_bench.cpp)."""
    bf16 = torch.bfloat16
    x = torch.full((8192, 2 * 28672), 0.0115, dtype=bf16, device=dev)
    out = torch.empty(8192, 28672, dtype=bf16, device=dev)
    io = 3.0 * 8192 * 28672 * 2
    for act in ("silu", "gelu"):
        fn = getattr(flashinfer, act + "_and_mul")
        report(act + "_and_mul", "flashinfer_python", "tokens=8192,d=28672,dtype=bf16",
               m(lambda: fn(x, out=out, enable_pdl=False)), io)
    del x, out
    qkv = torch.full((8192, 48 * 128), 0.0115, dtype=bf16, device=dev)
    q, k = qkv[:, : 32 * 128].view(8192, 32, 128), qkv[:, 32 * 128 : 40 * 128].view(8192, 8, 128)
    pos = torch.zeros(8192, dtype=torch.int32, device=dev)
    report("apply_rope_pos_ids", "flashinfer_python", "tokens=8192,heads=32/8,head_dim=128,dtype=bf16,in_place",
           m(lambda: flashinfer.apply_rope_pos_ids_inplace(q, k, pos)), 2.0 * 8192 * 40 * 128 * 2)
    va, vb = (torch.full((8192, 32, 128), 0.0115, dtype=bf16, device=dev) for _ in range(2))
    sa, sb = (torch.zeros(8192, 32, dtype=torch.float32, device=dev) for _ in range(2))
    report("merge_state", "flashinfer_python", "tokens=8192,heads=32,head_dim=128,dtype=bf16",
           m(lambda: flashinfer.merge_state(va, sa, vb, sb)), 3.0 * 8192 * 32 * (128 * 2 + 4))
    v4 = torch.full((8192, 4, 32, 128), 0.0115, dtype=bf16, device=dev)
    s4 = torch.zeros(8192, 4, 32, dtype=torch.float32, device=dev)
    report("merge_states", "flashinfer_python", "tokens=8192,heads=32,head_dim=128,dtype=bf16,index_sets=4",
           m(lambda: flashinfer.merge_states(v4, s4)), 5.0 * 8192 * 32 * (128 * 2 + 4))
    del qkv, va, vb, v4

    # The sampler: random logits uniform in [-8, 8) over 128256 tokens, 1 and 256 rows; FlashInfer's Python samplers
    # take seed/offset explicitly here, as flashcpp's do (no generator state read per call).
    smp = flashinfer.sampling
    for rows in (1, 256):
        logits = torch.rand(rows, 128256, device=dev) * 16 - 8
        probs = smp.softmax(logits, temperature=1.0, enable_pdl=False)
        cfg = f"rows={rows},vocab=128256"
        nb = 4.0 * rows * 128256
        kw = dict(seed=1, offset=0)
        report("softmax", "flashinfer_python", cfg, m(lambda: smp.softmax(logits, temperature=1.0, enable_pdl=False)),
               2 * nb)
        report("sampling_from_logits", "flashinfer_python", cfg, m(lambda: smp.sampling_from_logits(logits, **kw)), nb)
        report("top_k_sampling_from_probs", "flashinfer_python", cfg + ",top_k=50",
               m(lambda: smp.top_k_sampling_from_probs(probs, 50, **kw)), nb)
        report("top_p_sampling_from_probs", "flashinfer_python", cfg + ",top_p=0.9",
               m(lambda: smp.top_p_sampling_from_probs(probs, 0.9, **kw)), nb)
        # FlashInfer's Python composes this one with torch.softmax (flashcpp with FlashInfer's softmax kernel).
        report("top_k_top_p_sampling_from_logits", "flashinfer_python", cfg + ",top_k=50,top_p=0.9,top_k_first",
               m(lambda: smp.top_k_top_p_sampling_from_logits(logits, 50, 0.9, **kw)), nb)
        report("top_k_renorm_probs", "flashinfer_python", cfg + ",top_k=50", m(lambda: smp.top_k_renorm_probs(probs, 50)),
               2 * nb)
        report("top_k_mask_logits", "flashinfer_python", cfg + ",top_k=50", m(lambda: smp.top_k_mask_logits(logits, 50)),
               2 * nb)

    # DSA top-k: k 2048 of 65536 f32, rows 64 and 1, full-length rows.
    for rows in (64, 1):
        logits = torch.rand(rows, 65536, device=dev) * 2 - 1
        cfg = f"rows={rows},max_len=65536,k=2048,dtype=f32"
        nb = 4.0 * rows * 65536
        report("top_k", "flashinfer_python", cfg, m(lambda: flashinfer.top_k(logits, 2048)), nb + rows * 2048 * 8.0)
        lengths = torch.full((rows,), 65536, dtype=torch.int32, device=dev)
        table = torch.arange(rows * 65536, dtype=torch.int32, device=dev).view(rows, 65536)
        report("top_k_page_table_transform", "flashinfer_python", cfg,
               m(lambda: flashinfer.top_k_page_table_transform(logits, table, lengths, 2048)), nb + rows * 2048 * 8.0)
        offsets = torch.arange(rows, dtype=torch.int32, device=dev) * 65536
        report("top_k_ragged_transform", "flashinfer_python", cfg,
               m(lambda: flashinfer.top_k_ragged_transform(logits, offsets, lengths, 2048)), nb + rows * 2048 * 4.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--only", nargs="*", default=[], choices=("attention", "decode-step"),
                    help="decode-step: the activations, RoPE, cascade merges, sampler and DSA top-k of `flashcpp bench`")
    a = ap.parse_args()
    dev = torch.device("cuda:0")
    bf16 = torch.bfloat16
    m = lambda fn: measure(fn, a.warmup, a.iters)

    # Copy ceiling (bytes read + written), as flashcpp bench measures it.
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    t = m(lambda: dst.copy_(src))
    print(f"ceiling impl=torch copy_gbps={2 * (1 << 30) / (t[0] * 1e3):.1f}", flush=True)

    if not a.only or "decode-step" in a.only:
        decode_step_ops(m, dev)
    if a.only and "attention" not in a.only:
        return

    # Norms: 8192 x 4096 bf16.
    x = torch.randn(8192, 4096, dtype=bf16, device=dev)
    res = torch.randn_like(x)
    w = torch.rand(4096, dtype=bf16, device=dev) + 0.5
    out = torch.empty_like(x)
    io = 2.0 * x.numel() * 2
    cfg = "rows=8192,hidden=4096,dtype=bf16"
    report("rmsnorm", "flashinfer_python", cfg, m(lambda: flashinfer.norm.rmsnorm(x, w, 1e-6, out=out)), io)
    report("rmsnorm", "torch", cfg, m(lambda: F.rms_norm(x, (4096,), w, 1e-6)), io)
    report("fused_add_rmsnorm", "flashinfer_python", cfg, m(lambda: flashinfer.norm.fused_add_rmsnorm(x, res, w, 1e-6)),
           2 * io)

    # Batch decode: 64 x 4096, 32/8 heads, head 128, page 16 (1 GiB of KV).
    B, L, HQ, HKV, D, PS = 64, 4096, 32, 8, 128, 16
    ppr = L // PS
    kc = torch.randn(B * ppr, PS, HKV, D, dtype=bf16, device=dev)
    vc = torch.randn_like(kc)
    indptr = torch.arange(0, B + 1, dtype=torch.int32, device=dev) * ppr
    indices = torch.arange(0, B * ppr, dtype=torch.int32, device=dev)
    last = torch.full((B,), PS, dtype=torch.int32, device=dev)
    q = torch.randn(B, HQ, D, dtype=bf16, device=dev)
    kv_bytes = 2.0 * B * L * HKV * D * 2
    ws = torch.empty(128 << 20, dtype=torch.uint8, device=dev)
    for tc in (False, True):
        wrapper = flashinfer.decode.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
        t0 = time.perf_counter()
        wrapper.plan(indptr, indices, last, HQ, HKV, D, PS, q_data_type=bf16, kv_data_type=bf16)
        plan_us = (time.perf_counter() - t0) * 1e6
        report("batch_decode", "flashinfer_python",
               f"batch=64,ctx=4096,heads=32/8,head_dim=128,page=16,bf16,path={'tensor_cores' if tc else 'cuda_cores'}"
               f",plan_host_us={plan_us:.0f}", m(lambda: wrapper.run(q, (kc, vc))), kv_bytes)
    # torch SDPA decode on contiguous KV (the bandwidth anchor).
    kt = torch.randn(B, HKV, L, D, dtype=bf16, device=dev)
    vt = torch.randn_like(kt)
    q4 = q.view(B, HQ, 1, D)
    report("batch_decode", "torch", "batch=64,ctx=4096,heads=32/8,head_dim=128,contiguous,sdpa",
           m(lambda: F.scaled_dot_product_attention(q4, kt, vt, enable_gqa=True)), kv_bytes)

    # Append: one decode token per request.
    bi = torch.arange(B, dtype=torch.int32, device=dev)
    pos = torch.full((B,), L - 1, dtype=torch.int32, device=dev)
    nk = torch.randn(B, HKV, D, dtype=bf16, device=dev)
    report("append_paged_kv_cache", "flashinfer_python", "tokens=64,heads=8,head_dim=128,page=16,bf16",
           m(lambda: flashinfer.page.append_paged_kv_cache(nk, nk, bi, pos, (kc, vc), indices, indptr, last)))
    del kc, vc, kt, vt

    # Batch prefill: 8 x 1024 causal, 32/8 heads, head 128.
    N, S = 8, 1024
    flops = N * 4.0 * D * HQ * (S * (S + 1) / 2)
    qp = torch.randn(N * S, HQ, D, dtype=bf16, device=dev)
    kp = torch.randn(N * S, HKV, D, dtype=bf16, device=dev)
    vp = torch.randn_like(kp)
    qo = torch.arange(0, N + 1, dtype=torch.int32, device=dev) * S
    pkc = kp.view(N * S // PS, PS, HKV, D)
    pkv = vp.view(N * S // PS, PS, HKV, D)
    pind = torch.arange(0, N * S // PS, dtype=torch.int32, device=dev)
    pptr = torch.arange(0, N + 1, dtype=torch.int32, device=dev) * (S // PS)
    plast = torch.full((N,), PS, dtype=torch.int32, device=dev)
    for backend in ("fa2", "fa3"):
        pw = flashinfer.prefill.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=backend)
        pw.plan(qo, pptr, pind, plast, HQ, HKV, D, PS, causal=True, q_data_type=bf16)
        report("batch_prefill_paged", "flashinfer_python", f"requests=8,len=1024,causal,heads=32/8,head_dim=128,page=16,bf16,{backend}",
               m(lambda: pw.run(qp, (pkc, pkv))), 0, flops)
        rw = flashinfer.prefill.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=backend)
        rw.plan(qo, qo, HQ, HKV, D, causal=True, q_data_type=bf16)
        report("batch_prefill_ragged", "flashinfer_python", f"requests=8,len=1024,causal,heads=32/8,head_dim=128,bf16,{backend}",
               m(lambda: rw.run(qp, kp, vp)), 0, flops)
    qs = qp.view(N, S, HQ, D).transpose(1, 2)
    ks = kp.view(N, S, HKV, D).transpose(1, 2)
    vs = vp.view(N, S, HKV, D).transpose(1, 2)
    report("batch_prefill_ragged", "torch", "requests=8,len=1024,causal,heads=32/8,head_dim=128,bf16,sdpa",
           m(lambda: F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)), 0, flops)

    # Single decode (32768 tokens) and single prefill (8192 causal).
    ks1 = torch.randn(32768, HKV, D, dtype=bf16, device=dev)
    vs1 = torch.randn_like(ks1)
    q1 = torch.randn(HQ, D, dtype=bf16, device=dev)
    for tc in (False, True):
        report("single_decode", "flashinfer_python", f"ctx=32768,heads=32/8,head_dim=128,bf16,path={'tensor_cores' if tc else 'cuda_cores'}",
               m(lambda: flashinfer.single_decode_with_kv_cache(q1, ks1, vs1, use_tensor_cores=tc)), 2.0 * 32768 * HKV * D * 2)
    L1 = 8192
    q8 = torch.randn(L1, HQ, D, dtype=bf16, device=dev)
    k8 = torch.randn(L1, HKV, D, dtype=bf16, device=dev)
    v8 = torch.randn_like(k8)
    report("single_prefill", "flashinfer_python", "len=8192,causal,heads=32/8,head_dim=128,bf16,fa2",
           m(lambda: flashinfer.single_prefill_with_kv_cache(q8, k8, v8, causal=True, backend="fa2")), 0,
           4.0 * D * HQ * (L1 * (L1 + 1) / 2))


if __name__ == "__main__":
    main()
