#!/usr/bin/env python3
"""Same module, same inputs: FlashInfer's own Python API and flashcpp's C ABI, called in one process on the same
torch tensors, must give bit-identical outputs. Ops: rmsnorm, fused-add rmsnorm, RoPE (pos_ids, ragged, cos/sin cache, and
RoPE + FP8 quantization at GQA and DeepSeek MLA shapes), the gated activations, the
cascade merges, the sampler (softmax, renorm, mask, and every sampler at the same Philox seed and offset), DSA top-k (its
unordered sets compared row by row sorted), batch decode (CUDA-core path and
tensor-core path with fa2), batch prefill over a paged cache (fa2 and fa3) and batch MLA (fa2 and sm90).

Both sides load the same compiled module: FlashInfer takes a module from `<flashinfer package>/data/aot/<uri>/`
before it would compile one, so `scripts/gpu-check.sh flashinfer-python` links the modules `flashcpp build` made there;
flashcpp finds them through FLASHCPP_MODULE_PATH. The plans are made from the same host arrays with the same
workspace sizes, so FlashInfer's planner (inside the module) makes the same split decisions on both sides.

Prints one line per case: `same_module op=<name> identical=<True|False> max_abs_diff=<x>`; exits 1 if any differs.
With --time, also `same_module_time op=<name> config=<...> flashinfer_kernel_us=<> flashcpp_kernel_us=<> ratio=<>`
for the sampler, top-k, gated activation, RoPE (pos_ids, FP8) and merge cases: both sides' kernels timed on the same
tensors in this process.
Usage: python3 bench/flashinfer_same_module.py [--lib build-gpu/libflashcpp.so] [--only GROUP ...] [--time]
"""
import argparse
import ctypes as C
import math
import os
import statistics
import sys

import torch

import flashinfer
import tvm_ffi  # noqa: F401  (loads FlashInfer's libtvm_ffi now, before flashcpp looks for one)

MAX_RANK = 6
DTYPE = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2, torch.float8_e4m3fn: 4, torch.float8_e5m2: 5,
         torch.uint8: 7, torch.int32: 10, torch.int64: 12}
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


class Tensor(C.Structure):  # flashcpp_tensor (flashcpp/c/common.h)
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int32), ("device_type", C.c_int32), ("device_id", C.c_int32),
                ("rank", C.c_int32), ("shape", C.c_int64 * MAX_RANK), ("strides", C.c_int64 * MAX_RANK)]


def view(t):
    """A flashcpp_tensor over a torch tensor (the tensor must outlive the call)."""
    v = Tensor()
    v.data = t.data_ptr()
    v.dtype = DTYPE[t.dtype]
    v.device_type = 2 if t.is_cuda else (3 if t.is_pinned() else 1)
    v.device_id = t.device.index if t.is_cuda else 0
    v.rank = t.dim()
    for i in range(t.dim()):
        v.shape[i] = t.shape[i]
        v.strides[i] = t.stride(i)
    return v


P = C.POINTER(Tensor)


# The bundles of tensors begin with their size (C ABI 4.0.0): each construction passes C.sizeof first.
class Workspace(C.Structure):  # flashcpp_workspace
    _fields_ = [("struct_size", C.c_uint32), ("float_buffer", P), ("int_buffer", P), ("pinned_int_buffer", P)]


class PagedKvCache(C.Structure):  # flashcpp_paged_kv_cache
    _fields_ = [("struct_size", C.c_uint32), ("k_cache", P), ("v_cache", P), ("indices", P), ("indptr", P), ("last_page_len", P),
                ("layout", C.c_int32)]


class BatchPrefillConfig(C.Structure):  # flashcpp_batch_prefill_config
    _fields_ = [("struct_size", C.c_uint32), ("kv_storage", C.c_int32), ("num_qo_heads", C.c_int64),
                ("num_kv_heads", C.c_int64), ("head_dim_qk", C.c_int64), ("head_dim_vo", C.c_int64),
                ("page_size", C.c_int64), ("q_dtype", C.c_int32), ("kv_dtype", C.c_int32), ("o_dtype", C.c_int32),
                ("layout", C.c_int32), ("causal", C.c_int32), ("window_left", C.c_int64),
                ("logits_soft_cap", C.c_double), ("sm_scale", C.c_double), ("backend", C.c_int32),
                ("enable_cuda_graph", C.c_int32), ("enable_pdl", C.c_int32), ("fixed_split_size", C.c_int64),
                ("disable_split_kv", C.c_int32)]


class BatchDecodeConfig(C.Structure):  # flashcpp_batch_decode_config
    _fields_ = [("struct_size", C.c_uint32), ("num_qo_heads", C.c_int64), ("num_kv_heads", C.c_int64),
                ("head_dim", C.c_int64), ("page_size", C.c_int64), ("q_dtype", C.c_int32), ("kv_dtype", C.c_int32),
                ("o_dtype", C.c_int32), ("layout", C.c_int32), ("window_left", C.c_int64),
                ("logits_soft_cap", C.c_double), ("sm_scale", C.c_double), ("backend", C.c_int32),
                ("prefill_backend", C.c_int32), ("enable_cuda_graph", C.c_int32), ("enable_pdl", C.c_int32)]


class BatchMlaConfig(C.Structure):  # flashcpp_batch_mla_config
    _fields_ = [("struct_size", C.c_uint32), ("num_heads", C.c_int64), ("page_size", C.c_int64),
                ("q_dtype", C.c_int32), ("kv_dtype", C.c_int32), ("causal", C.c_int32),
                ("return_lse_base_on_e", C.c_int32), ("backend", C.c_int32), ("sm_scale", C.c_double)]


class SamplingOptions(C.Structure):  # flashcpp_sampling_options
    _fields_ = [("struct_size", C.c_uint32), ("deterministic", C.c_int32), ("philox_seed", C.c_uint64),
                ("philox_offset", C.c_uint64)]


class SamplingWorkspace(C.Structure):  # flashcpp_sampling_workspace
    _fields_ = [("struct_size", C.c_uint32), ("softmax_buffer", P), ("row_states", P)]


class RopeQuantizeArgs(C.Structure):  # flashcpp_rope_quantize_args
    _fields_ = [("struct_size", C.c_uint32), ("q_rope", P), ("k_rope", P), ("q_rope_out", P), ("k_rope_out", P),
                ("q_nope", P), ("k_nope", P), ("q_nope_out", P), ("k_nope_out", P), ("cos_sin_cache", P),
                ("pos_ids", P), ("interleave", C.c_int32), ("enable_pdl", C.c_int32), ("quant_scale_q", C.c_double),
                ("quant_scale_kv", C.c_double)]


class PagedMlaCache(C.Structure):  # flashcpp_paged_mla_kv_cache
    _fields_ = [("struct_size", C.c_uint32), ("ckv_cache", P), ("kpe_cache", P), ("indices", P), ("indptr", P),
                ("last_page_len", P)]


class RopeQuantizeAppendArgs(C.Structure):  # flashcpp_rope_quantize_append_args (C ABI 3.6.0)
    _fields_ = [("struct_size", C.c_uint32), ("q_rope", P), ("k_rope", P), ("q_nope", P), ("k_nope", P), ("v", P),
                ("q_rope_out", P), ("q_nope_out", P), ("cos_sin_cache", P), ("pos_ids", P), ("batch_indices", P),
                ("positions", P), ("kv_cache", C.POINTER(PagedKvCache)), ("mla_cache", C.POINTER(PagedMlaCache)),
                ("interleave", C.c_int32), ("enable_pdl", C.c_int32), ("quant_scale_q", C.c_double),
                ("quant_scale_kv", C.c_double)]


class BatchMlaCache(C.Structure):  # flashcpp_batch_mla_cache
    _fields_ = [("struct_size", C.c_uint32), ("ckv_cache", P), ("kpe_cache", P), ("kv_indices", P)]


def loaded_tvm_ffi():
    """The libtvm_ffi this process has loaded (FlashInfer's): flashcpp must use that one, since it refuses to load
    a second TVM-FFI runtime into a process."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path) == "libtvm_ffi.so":
                return path
    return None


class Flashcpp:
    def __init__(self, path):
        lib = loaded_tvm_ffi()
        if lib is not None:
            os.environ["FLASHCPP_TVM_FFI_LIB"] = lib  # read when flashcpp makes its runtime (first call)
        self.lib = C.CDLL(path)
        self.lib.flashcpp_last_error.restype = C.c_char_p
        self.keep = []  # views and structs alive until the next call

    def t(self, tensor):
        v = view(tensor)
        self.keep.append(v)
        return C.byref(v)

    def call(self, name, *args):
        status = getattr(self.lib, name)(*args)
        self.keep.clear()
        if status != 0:
            raise RuntimeError(f"{name}: status {status}: {self.lib.flashcpp_last_error().decode()}")


def stream():
    return C.c_void_p(torch.cuda.current_stream().cuda_stream)


def report(op, want, got, failures):
    if want.dtype in FP8 and got.dtype == want.dtype:  # FP8 codes compared as bytes
        same = want.shape == got.shape and torch.equal(want.view(torch.uint8), got.view(torch.uint8))
    else:
        same = want.shape == got.shape and torch.equal(want, got)
    diff = (want.float() - got.float()).abs().max().item() if want.shape == got.shape else math.inf
    print(f"same_module op={op} identical={same} max_abs_diff={diff:.3e}", flush=True)
    if not same:
        failures.append(op)


def time_pair(op, config, fi_call, fc_call, reps=15, calls=20):
    """Kernel time of each side on the same tensors in this process: each side's call captured `calls` times into
    one CUDA graph (so neither Python's nor ctypes' host time shows), the graph replayed between two CUDA events,
    median over `reps`, the two sides alternating. Host time is each side's own business (`flashcpp bench` times
    flashcpp's C++ calls, bench/flashinfer_ops_python.py FlashInfer's Python API)."""
    per = {"flashinfer": [], "flashcpp": []}
    graphs = {}
    for side, fn in (("flashinfer", fi_call), ("flashcpp", fc_call)):
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
        graphs[side] = g
    for r in range(reps):
        for side in ("flashinfer", "flashcpp") if r % 2 == 0 else ("flashcpp", "flashinfer"):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            graphs[side].replay()
            b.record()
            torch.cuda.synchronize()
            per[side].append(a.elapsed_time(b) * 1e3 / calls)
    fi, us = statistics.median(per["flashinfer"]), statistics.median(per["flashcpp"])
    print(f"same_module_time op={op} config={config} flashinfer_kernel_us={fi:.2f} flashcpp_kernel_us={us:.2f} "
          f"ratio={fi / us:.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default="libflashcpp.so")
    ap.add_argument("--only", nargs="*", default=[],
                    choices=("norm", "activation", "rope", "cascade", "sampling", "topk", "attention"),
                    help="only these op groups (attention: paged decode / prefill and batch MLA)")
    ap.add_argument("--time", action="store_true",
                    help="also time both sides' kernels on the same tensors (sampling, topk, activation, rope, cascade; "
                         "ratio = FlashInfer / ours)")
    args = ap.parse_args()

    def selected(group):
        return not args.only or group in args.only

    fc = Flashcpp(args.lib)
    torch.manual_seed(0)
    dev, bf16 = "cuda", torch.bfloat16
    failures = []

    if selected("norm"):
        # ---- norms: 8192 x 4096 bf16
        x = torch.randn(8192, 4096, device=dev, dtype=bf16)
        w = torch.randn(4096, device=dev, dtype=bf16)
        want = flashinfer.rmsnorm(x, w, eps=1e-6)
        got = torch.empty_like(x)
        fc.call("flashcpp_rmsnorm", fc.t(got), fc.t(x), fc.t(w), C.c_double(1e-6), C.c_int32(0), stream())
        report("rmsnorm", want, got, failures)
        r = torch.randn_like(x)
        x1, r1, x2, r2 = x.clone(), r.clone(), x.clone(), r.clone()
        flashinfer.fused_add_rmsnorm(x1, r1, w, eps=1e-6)
        fc.call("flashcpp_fused_add_rmsnorm", fc.t(x2), fc.t(r2), fc.t(w), C.c_double(1e-6), C.c_int32(0), stream())
        report("fused_add_rmsnorm.input", x1, x2, failures)
        report("fused_add_rmsnorm.residual", r1, r2, failures)

    if selected("activation"):
        # ---- gated activations: 4099 x (2 x 14336) bf16 (FlashInfer's PDL default differs by GPU: both pass False)
        xa = torch.randn(4099, 2 * 14336, device=dev, dtype=bf16)
        for act in ("silu", "gelu", "gelu_tanh"):
            want = getattr(flashinfer, act + "_and_mul")(xa, enable_pdl=False)
            got = torch.empty_like(want)
            fc.call(f"flashcpp_{act}_and_mul", fc.t(got), fc.t(xa), C.c_int32(0), stream())
            report(act + "_and_mul", want, got, failures)
            if args.time:
                time_pair(act + "_and_mul", "rows=4099,d=14336",
                          lambda: getattr(flashinfer, act + "_and_mul")(xa, enable_pdl=False),
                          lambda: fc.call(f"flashcpp_{act}_and_mul", fc.t(got), fc.t(xa), C.c_int32(0), stream()))

    if selected("rope"):
        # ---- RoPE: 1029 tokens, q 32 / k 8 heads of 128, positions below 4096; out of place, then the cos/sin cache form
        q = torch.randn(1029, 32, 128, device=dev, dtype=bf16)
        k = torch.randn(1029, 8, 128, device=dev, dtype=bf16)
        pos = torch.randint(0, 4096, (1029,), device=dev, dtype=torch.int32)
        for interleave in (False, True):
            want_q, want_k = flashinfer.apply_rope_pos_ids(q, k, pos, rotary_dim=64, interleave=interleave)
            got_q, got_k = torch.empty_like(q), torch.empty_like(k)
            fc.call("flashcpp_apply_rope_pos_ids", fc.t(q), fc.t(k), fc.t(got_q), fc.t(got_k), fc.t(pos), C.c_int64(64),
                    C.c_int32(int(interleave)), C.c_double(1.0), C.c_double(1e4), stream())
            report(f"apply_rope_pos_ids.interleave_{interleave}.q", want_q, got_q, failures)
            report(f"apply_rope_pos_ids.interleave_{interleave}.k", want_k, got_k, failures)
        want_q, want_k = flashinfer.apply_llama31_rope_pos_ids(q, k, pos)
        fc.call("flashcpp_apply_llama31_rope_pos_ids", fc.t(q), fc.t(k), fc.t(got_q), fc.t(got_k), fc.t(pos), C.c_int64(0),
                C.c_int32(0), C.c_double(8.0), C.c_double(5e5), C.c_double(1.0), C.c_double(4.0), C.c_double(8192.0),
                stream())
        report("apply_llama31_rope_pos_ids.q", want_q, got_q, failures)
        inv = 1e4 ** (-torch.arange(0, 128, 2, device=dev, dtype=torch.float64) / 128)
        ang = torch.arange(4096, device=dev, dtype=torch.float64)[:, None] * inv[None, :]
        cache = torch.cat([ang.cos(), ang.sin()], dim=1).float().contiguous()
        want_q, want_k = flashinfer.apply_rope_with_cos_sin_cache(pos, q.reshape(1029, -1), k.reshape(1029, -1), 128, cache)
        fc.call("flashcpp_apply_rope_with_cos_sin_cache", fc.t(q), fc.t(k), fc.t(got_q), fc.t(got_k), fc.t(cache), fc.t(pos),
                C.c_int32(0), stream())
        report("apply_rope_with_cos_sin_cache.q", want_q.view(1029, 32, 128), got_q, failures)
        report("apply_rope_with_cos_sin_cache.k", want_k.view(1029, 8, 128), got_k, failures)
        # The ragged batch: 5 requests covering all 1029 tokens (FlashInfer's Python leaves uncovered rows as empty_like
        # left them), each from its own first position; int32 and int64 indices.
        for idt in (torch.int32, torch.int64):
            indptr = torch.tensor([0, 1, 300, 301, 777, 1029], device=dev, dtype=idt)
            offsets = torch.tensor([5, 0, 3000, 17, 2000], device=dev, dtype=idt)
            want_q, want_k = flashinfer.apply_rope(q, k, indptr, offsets, rotary_dim=64, interleave=idt == torch.int64)
            got_q, got_k = torch.empty_like(q), torch.empty_like(k)
            fc.call("flashcpp_apply_rope", fc.t(q), fc.t(k), fc.t(got_q), fc.t(got_k), fc.t(indptr), fc.t(offsets),
                    C.c_int64(64), C.c_int32(int(idt == torch.int64)), C.c_double(1.0), C.c_double(1e4), stream())
            report(f"apply_rope.{idt}.q", want_q, got_q, failures)
            report(f"apply_rope.{idt}.k", want_k, got_k, failures)
            want_q, want_k = flashinfer.apply_llama31_rope(q, k, indptr, offsets)
            fc.call("flashcpp_apply_llama31_rope", fc.t(q), fc.t(k), fc.t(got_q), fc.t(got_k), fc.t(indptr),
                    fc.t(offsets), C.c_int64(0), C.c_int32(0), C.c_double(8.0), C.c_double(5e5), C.c_double(1.0),
                    C.c_double(4.0), C.c_double(8192.0), stream())
            report(f"apply_llama31_rope.{idt}.q", want_q, got_q, failures)
            report(f"apply_llama31_rope.{idt}.k", want_k, got_k, failures)

        # ---- RoPE + FP8 quantization (FlashInfer's rope_quantize_fp8 / mla_rope_quantize_fp8): GQA (k rank 3) to e4m3
        # and e5m2, then DeepSeek MLA (q 128 heads of 64 rope + 512 nope sliced from one [n, 128, 576] tensor, k one
        # latent [n, 64 + 512] row), NeoX and GPT-J, the scales, and no nope part (None on FlashInfer's side).
        def rope_quantize(name, q_rope, k_rope, q_nope, k_nope, cache, pos, qdt, is_neox, sq, skv):
            want = flashinfer.rope.rope_quantize_fp8(q_rope, k_rope, q_nope, k_nope, cache, pos, is_neox=is_neox,
                                                     quantize_dtype=qdt, quant_scale_q=sq, quant_scale_kv=skv)
            outs = [torch.empty_like(q_rope, dtype=qdt), torch.empty_like(k_rope, dtype=qdt)]
            if q_nope is not None:
                outs += [torch.empty_like(q_nope, dtype=qdt), torch.empty_like(k_nope, dtype=qdt)]
            a = RopeQuantizeArgs()
            a.struct_size = C.sizeof(RopeQuantizeArgs)
            ptr = lambda t: C.pointer(view(t))  # noqa: E731  (the struct keeps the views alive)
            a.q_rope, a.k_rope, a.q_rope_out, a.k_rope_out = ptr(q_rope), ptr(k_rope), ptr(outs[0]), ptr(outs[1])
            if q_nope is not None:
                a.q_nope, a.k_nope, a.q_nope_out, a.k_nope_out = ptr(q_nope), ptr(k_nope), ptr(outs[2]), ptr(outs[3])
            a.cos_sin_cache, a.pos_ids = ptr(cache), ptr(pos)
            a.interleave, a.enable_pdl, a.quant_scale_q, a.quant_scale_kv = int(not is_neox), 0, sq, skv
            fc.call("flashcpp_rope_quantize_fp8", C.byref(a), stream())
            for part, w, g in zip(("q_rope", "k_rope", "q_nope", "k_nope"), want, outs):
                report(f"rope_quantize_fp8.{name}.{part}", w, g, failures)

        inv64 = 1e4 ** (-torch.arange(0, 64, 2, device=dev, dtype=torch.float64) / 64)
        ang64 = torch.arange(4096, device=dev, dtype=torch.float64)[:, None] * inv64[None, :]
        cache64 = torch.cat([ang64.cos(), ang64.sin()], dim=1).float().contiguous()
        qg = torch.randn(1029, 32, 128, device=dev, dtype=bf16)
        kg = torch.randn(1029, 8, 128, device=dev, dtype=bf16)
        for qdt, is_neox in ((torch.float8_e4m3fn, True), (torch.float8_e5m2, False)):
            rope_quantize(f"gqa.{qdt}.neox_{is_neox}", qg[..., 64:], kg[..., 64:], qg[..., :64], kg[..., :64], cache64,
                          pos, qdt, is_neox, 1.0, 1.0)
        rope_quantize("gqa.no_nope", qg[..., :64], kg[..., :64], None, None, cache64, pos, torch.float8_e4m3fn, True,
                      1.0, 1.0)
        qm = torch.randn(1029, 128, 576, device=dev, dtype=bf16)
        km = torch.randn(1029, 576, device=dev, dtype=bf16)
        pos64 = torch.randint(0, 4096, (1029,), device=dev, dtype=torch.int64)
        for is_neox, sq, skv in ((True, 1.0, 1.0), (False, 0.5, 4.0)):
            rope_quantize(f"mla.neox_{is_neox}.scales_{sq}_{skv}", qm[..., 512:], km[:, 512:], qm[..., :512], km[:, :512],
                          cache64, pos64, torch.float8_e4m3fn, is_neox, sq, skv)

        # ---- The same appended to a paged FP8 cache (rope_quantize_fp8_append_paged_kv_cache): GQA into NHD k/v caches
        # of 16-token pages, and DeepSeek MLA into ckv/kpe caches of 64-token pages; 1029 tokens spread over 7
        # requests whose pages are a random permutation; the caches start as the same random bytes on both sides.
        def rope_append(name, q_rope, k_rope, q_nope, k_nope, v, cache, pos, caches, page_size, is_neox, sq, skv):
            n, batch = q_rope.shape[0], 7
            bi = torch.arange(n, device=dev, dtype=torch.int32) % batch
            counts = torch.bincount(bi, minlength=batch)
            at = torch.zeros(n, device=dev, dtype=torch.int32)
            for b in range(batch):
                at[bi == b] = torch.arange(int(counts[b]), device=dev, dtype=torch.int32)
            pages = counts // page_size + 1
            indptr = torch.cat([torch.zeros(1, device=dev, dtype=torch.int64), pages.cumsum(0)]).to(torch.int32)
            total = int(indptr[-1])
            indices = torch.randperm(total, device=dev).to(torch.int32)
            last = (counts % page_size + 1).to(torch.int32)
            shapes = [(total,) + s for s in caches]
            theirs = [torch.randint(0, 256, sh, device=dev, dtype=torch.uint8).view(torch.float8_e4m3fn) for sh in shapes]
            ours = [t.clone() for t in theirs]
            want_q = flashinfer.rope.rope_quantize_fp8_append_paged_kv_cache(
                q_rope, k_rope, q_nope, k_nope, v, cache, pos, tuple(theirs), indices, indptr, bi, at, is_neox=is_neox,
                quantize_dtype=torch.float8_e4m3fn, quant_scale_q=sq, quant_scale_kv=skv, page_size=page_size)
            outs = [torch.empty_like(q_rope, dtype=torch.float8_e4m3fn), torch.empty_like(q_nope, dtype=torch.float8_e4m3fn)]
            keep = []
            ptr = lambda t: C.pointer(view(t))  # noqa: E731
            a = RopeQuantizeAppendArgs()
            a.struct_size = C.sizeof(RopeQuantizeAppendArgs)
            a.q_rope, a.k_rope, a.q_nope, a.k_nope = ptr(q_rope), ptr(k_rope), ptr(q_nope), ptr(k_nope)
            a.v = ptr(v) if v is not None else None
            a.q_rope_out, a.q_nope_out, a.cos_sin_cache, a.pos_ids = ptr(outs[0]), ptr(outs[1]), ptr(cache), ptr(pos)
            a.batch_indices, a.positions = ptr(bi), ptr(at)
            table = [ptr(indices), ptr(indptr), ptr(last)]
            if v is None:
                keep.append(PagedMlaCache(C.sizeof(PagedMlaCache), ptr(ours[0]), ptr(ours[1]), *table))
                a.mla_cache = C.pointer(keep[-1])
            else:
                keep.append(PagedKvCache(C.sizeof(PagedKvCache), ptr(ours[0]), ptr(ours[1]), *table, 0))
                a.kv_cache = C.pointer(keep[-1])
            a.interleave, a.enable_pdl, a.quant_scale_q, a.quant_scale_kv = int(not is_neox), 0, sq, skv
            fc.call("flashcpp_rope_quantize_append_paged_kv_cache", C.byref(a), stream())
            for part, w, g in zip(("q_rope", "q_nope"), want_q, outs):
                report(f"rope_quantize_append_paged_kv_cache.{name}.{part}", w, g, failures)
            for part, w, g in zip(("cache0", "cache1"), theirs, ours):
                report(f"rope_quantize_append_paged_kv_cache.{name}.{part}", w, g, failures)

        vg = torch.randn(1029, 8, 128, device=dev, dtype=bf16)
        rope_append("gqa.nhd", qg[..., 64:], kg[..., 64:], qg[..., :64], kg[..., :64], vg, cache64, pos,
                    [(16, 8, 128), (16, 8, 128)], 16, True, 1.0, 2.0)
        rope_append("mla", qm[..., 512:], km[:, 512:], qm[..., :512], km[:, :512], None, cache64, pos64,
                    [(64, 512), (64, 64)], 64, False, 0.5, 1.0)
        if args.time:
            got_q, got_k = torch.empty_like(q), torch.empty_like(k)
            time_pair("apply_rope_pos_ids", "tokens=1029,hq=32,hk=8,d=128,rotary=64",
                      lambda: flashinfer.apply_rope_pos_ids(q, k, pos, rotary_dim=64),
                      lambda: fc.call("flashcpp_apply_rope_pos_ids", fc.t(q), fc.t(k), fc.t(got_q), fc.t(got_k),
                                      fc.t(pos), C.c_int64(64), C.c_int32(0), C.c_double(1.0), C.c_double(1e4),
                                      stream()))
            outs = [torch.empty_like(qm[..., 512:], dtype=torch.float8_e4m3fn),
                    torch.empty_like(km[:, 512:], dtype=torch.float8_e4m3fn),
                    torch.empty_like(qm[..., :512], dtype=torch.float8_e4m3fn),
                    torch.empty_like(km[:, :512], dtype=torch.float8_e4m3fn)]
            a = RopeQuantizeArgs()
            a.struct_size = C.sizeof(RopeQuantizeArgs)
            ptr = lambda t: C.pointer(view(t))  # noqa: E731
            a.q_rope, a.k_rope, a.q_rope_out, a.k_rope_out = ptr(qm[..., 512:]), ptr(km[:, 512:]), ptr(outs[0]), ptr(outs[1])
            a.q_nope, a.k_nope, a.q_nope_out, a.k_nope_out = ptr(qm[..., :512]), ptr(km[:, :512]), ptr(outs[2]), ptr(outs[3])
            a.cos_sin_cache, a.pos_ids, a.quant_scale_q, a.quant_scale_kv = ptr(cache64), ptr(pos64), 1.0, 1.0
            time_pair("rope_quantize_fp8", "mla,tokens=1029,hq=128,64+512",
                      lambda: flashinfer.rope.rope_quantize_fp8(qm[..., 512:], km[:, 512:], qm[..., :512], km[:, :512],
                                                                cache64, pos64, is_neox=True,
                                                                quantize_dtype=torch.float8_e4m3fn),
                      lambda: fc.call("flashcpp_rope_quantize_fp8", C.byref(a), stream()))

    if selected("cascade"):
        # ---- cascade merges: 1031 tokens x 32 heads x 128, s (log2 lse) f32
        va, vb = (torch.randn(1031, 32, 128, device=dev, dtype=bf16) for _ in range(2))
        sa, sb = (torch.randn(1031, 32, device=dev, dtype=torch.float32) * 4 for _ in range(2))
        want_v, want_s = flashinfer.merge_state(va, sa, vb, sb)
        got_v, got_s = torch.empty_like(va), torch.empty_like(sa)
        fc.call("flashcpp_merge_state", fc.t(va), fc.t(sa), fc.t(vb), fc.t(sb), fc.t(got_v), fc.t(got_s), stream())
        report("merge_state.v", want_v, got_v, failures)
        report("merge_state.s", want_s, got_s, failures)
        if args.time:
            time_pair("merge_state", "tokens=1031,heads=32,d=128", lambda: flashinfer.merge_state(va, sa, vb, sb),
                      lambda: fc.call("flashcpp_merge_state", fc.t(va), fc.t(sa), fc.t(vb), fc.t(sb), fc.t(got_v),
                                      fc.t(got_s), stream()))
        mask = (torch.arange(1031, device=dev) % 3 != 0).to(torch.uint8)
        v1, s1, v2, s2 = va.clone(), sa.clone(), va.clone(), sa.clone()
        flashinfer.merge_state_in_place(v1, s1, vb, sb, mask=mask.bool())  # the same bytes, as bool
        fc.call("flashcpp_merge_state_in_place", fc.t(v2), fc.t(s2), fc.t(vb), fc.t(sb), fc.t(mask), stream())
        report("merge_state_in_place.v", v1, v2, failures)
        report("merge_state_in_place.s", s1, s2, failures)
        vs = torch.randn(1031, 5, 32, 128, device=dev, dtype=bf16)
        ss = torch.randn(1031, 5, 32, device=dev, dtype=torch.float32) * 4
        want_v, want_s = flashinfer.merge_states(vs, ss)
        fc.call("flashcpp_merge_states", fc.t(vs), fc.t(ss), fc.t(got_v), fc.t(got_s), stream())
        report("merge_states.v", want_v, got_v, failures)
        report("merge_states.s", want_s, got_s, failures)

    if selected("sampling"):
        # ---- the sampler: 37 rows (and 300 samples of them through indices) over a 128256-token vocabulary
        rows, vocab, seed, offset = 37, 128256, 20261203, 64
        smp = flashinfer.sampling
        logits = torch.randn(rows, vocab, device=dev, dtype=torch.float32) * 4
        sm_ws = torch.zeros(1 << 20, dtype=torch.uint8, device=dev)
        row_states = torch.zeros(1 << 20, dtype=torch.uint8, device=dev)
        opts = SamplingOptions(C.sizeof(SamplingOptions), 1, seed, offset)
        probs = torch.empty_like(logits)
        out = torch.empty_like(logits)
        idx = torch.randint(0, rows, (300,), device=dev, dtype=torch.int32)
        kw = dict(indices=idx, deterministic=True, seed=seed, offset=offset)
        topk_rows = torch.randint(1, 200, (rows,), device=dev, dtype=torch.int32)
        topp_rows = torch.rand(rows, device=dev, dtype=torch.float32) * 0.9 + 0.05
        samples = torch.empty(300, device=dev, dtype=torch.int32)
        scratch = torch.empty_like(logits)
        ws = SamplingWorkspace(C.sizeof(SamplingWorkspace), C.pointer(view(sm_ws)), C.pointer(view(row_states)))
        none, i64, f64 = None, C.c_int64, C.c_double

        def sampler(fn, src, *params):  # flashcpp's C entry (src, samples, [per_row, scalar]..., indices, options)
            def call():
                args = [fc.t(src), fc.t(samples)]
                for i in range(0, len(params), 2):
                    args += [fc.t(params[i]) if params[i] is not None else None, params[i + 1]]
                fc.call(fn, *args, fc.t(idx), C.byref(opts), stream())
                return samples
            return call

        # (op, FlashInfer's Python call, flashcpp's C call): each returns the tensor it wrote.
        cases = [
            ("softmax", lambda: smp.softmax(logits, temperature=0.7, enable_pdl=False),
             lambda: (fc.call("flashcpp_softmax", fc.t(sm_ws), fc.t(logits), fc.t(probs), None, f64(0.7),
                              C.c_int32(0), stream()), probs)[1]),
            ("top_k_renorm_probs", lambda: smp.top_k_renorm_probs(probs, 50),
             lambda: (fc.call("flashcpp_top_k_renorm_probs", fc.t(probs), fc.t(out), None, i64(50), fc.t(row_states),
                              stream()), out)[1]),
            ("top_p_renorm_probs", lambda: smp.top_p_renorm_probs(probs, 0.9),
             lambda: (fc.call("flashcpp_top_p_renorm_probs", fc.t(probs), fc.t(out), None, f64(0.9), stream()),
                      out)[1]),
            ("top_k_mask_logits", lambda: smp.top_k_mask_logits(logits, 50),
             lambda: (fc.call("flashcpp_top_k_mask_logits", fc.t(logits), fc.t(out), None, i64(50), fc.t(row_states),
                              stream()), out)[1]),
            ("sampling_from_probs", lambda: smp.sampling_from_probs(probs, **kw),
             sampler("flashcpp_sampling_from_probs", probs)),
            ("sampling_from_logits", lambda: smp.sampling_from_logits(logits, **kw),
             sampler("flashcpp_sampling_from_logits", logits)),
            ("top_p_sampling_from_probs", lambda: smp.top_p_sampling_from_probs(probs, 0.8, **kw),
             sampler("flashcpp_top_p_sampling_from_probs", probs, none, f64(0.8))),
            ("top_p_sampling_from_probs.per_row", lambda: smp.top_p_sampling_from_probs(probs, topp_rows, **kw),
             sampler("flashcpp_top_p_sampling_from_probs", probs, topp_rows, f64(0))),
            ("top_k_sampling_from_probs", lambda: smp.top_k_sampling_from_probs(probs, 40, **kw),
             sampler("flashcpp_top_k_sampling_from_probs", probs, none, i64(40))),
            ("min_p_sampling_from_probs", lambda: smp.min_p_sampling_from_probs(probs, 0.05, **kw),
             sampler("flashcpp_min_p_sampling_from_probs", probs, none, f64(0.05))),
            ("top_k_top_p_sampling_from_probs", lambda: smp.top_k_top_p_sampling_from_probs(probs, 40, 0.8, filter_apply_order="joint", **kw),
             sampler("flashcpp_top_k_top_p_sampling_from_probs", probs, none, i64(40), none, f64(0.8))),
            ("top_k_top_p_sampling_from_probs.per_row",
             lambda: smp.top_k_top_p_sampling_from_probs(probs, topk_rows, topp_rows, filter_apply_order="joint",
                                                         **kw),
             sampler("flashcpp_top_k_top_p_sampling_from_probs", probs, topk_rows, i64(0), topp_rows, f64(0))),
            # The fused sampler from logits, joint order. FlashInfer's Python composes it with torch's softmax, so
            # here its side runs the module's own softmax and sampler, the two kernels flashcpp's call runs.
            ("top_k_top_p_sampling_from_logits.joint",
             lambda: smp.top_k_top_p_sampling_from_probs(smp.softmax(logits, enable_pdl=False), 40, 0.8,
                                                         filter_apply_order="joint", **kw),
             lambda: (fc.call("flashcpp_top_k_top_p_sampling_from_logits", C.byref(ws), fc.t(logits), fc.t(scratch),
                              fc.t(samples), None, i64(40), None, f64(0.8), C.c_int32(1), fc.t(idx), C.byref(opts),
                              stream()), samples)[1]),
        ]
        for op, fi_call, fc_call in cases:
            want = fi_call().clone()
            fc_call()  # the first: probs for the cases after softmax
            got = fc_call().clone()
            again = fi_call().clone()
            if not torch.equal(want, again):
                # FlashInfer's own two runs differ (its multi-CTA top-k renorm sums the kept mass with atomics):
                # compare within the spread of its own runs instead of bit for bit.
                spread = (want.float() - again.float()).abs().max().item()
                diff = (want.float() - got.float()).abs().max().item()
                ok = diff <= max(4 * spread, 1e-6)
                print(f"same_module op={op} identical=nondeterministic max_abs_diff={diff:.3e} "
                      f"flashinfer_self_diff={spread:.3e} within={ok}", flush=True)
                if not ok:
                    failures.append(op)
            else:
                report(op, want, got, failures)
            if args.time:
                time_pair(op, f"rows={rows},vocab={vocab}", fi_call, fc_call)

    if selected("topk"):
        # ---- DSA top-k: k 2048 of 65536 f32 logits (distinct values: the selected set is unique), 64 rows (FlashInfer's
        # filtered kernel) and 1 (its multi-CTA radix select). The results are unordered sets whose order changes from
        # run to run (atomics), so each row is compared sorted.
        def rows_sorted(x):
            return torch.sort(x.to(torch.int64), dim=-1).values

        row_states = torch.zeros(1 << 20, dtype=torch.uint8, device=dev)
        for rows in (64, 1):
            logits = ((torch.stack([torch.randperm(65536, device=dev) for _ in range(rows)]) + 0.25) / 32768 - 1).float()
            want_v, want_i = flashinfer.top_k(logits, 2048)
            got_i = torch.empty(rows, 2048, dtype=torch.int32, device=dev)
            got_v = torch.empty(rows, 2048, dtype=torch.float32, device=dev)
            fc.call("flashcpp_top_k", fc.t(logits), fc.t(got_i), fc.t(got_v), fc.t(row_states), stream())
            report(f"top_k.rows_{rows}.indices", rows_sorted(want_i), rows_sorted(got_i), failures)
            report(f"top_k.rows_{rows}.values", torch.sort(want_v, dim=-1).values, torch.sort(got_v, dim=-1).values,
                   failures)
            # DSA decode: 2 MTP tokens per request (row_to_batch), a token page table wider than max_len, random
            # lengths (some shorter than k: positions in order, then -1).
            batch = max(rows // 2, 1)
            r2b = (torch.arange(rows, device=dev, dtype=torch.int32) // 2).clamp(max=batch - 1).to(torch.int32)
            table = torch.randperm(batch * 65600, device=dev).to(torch.int32).view(batch, 65600)
            lengths = torch.randint(1, 65537, (rows,), device=dev, dtype=torch.int32)
            lengths[: min(rows, 3)] = torch.tensor([1000, 2048, 65536][: min(rows, 3)], dtype=torch.int32)
            want = flashinfer.top_k_page_table_transform(logits, table, lengths, 2048, row_to_batch=r2b)
            got = torch.empty_like(want)
            fc.call("flashcpp_top_k_page_table_transform", fc.t(logits), fc.t(lengths), fc.t(table), fc.t(r2b),
                    fc.t(got), fc.t(row_states), stream())
            report(f"top_k_page_table_transform.rows_{rows}", rows_sorted(want), rows_sorted(got), failures)
            offsets = (torch.cumsum(lengths, 0) - lengths).to(torch.int32)
            want = flashinfer.top_k_ragged_transform(logits, offsets, lengths, 2048)
            got = torch.empty_like(want)
            fc.call("flashcpp_top_k_ragged_transform", fc.t(logits), fc.t(offsets), fc.t(lengths), fc.t(got),
                    fc.t(row_states), stream())
            report(f"top_k_ragged_transform.rows_{rows}", rows_sorted(want), rows_sorted(got), failures)
            if args.time:
                cfg = f"rows={rows},max_len=65536,k=2048"
                time_pair("top_k", cfg, lambda: flashinfer.top_k(logits, 2048),
                          lambda: fc.call("flashcpp_top_k", fc.t(logits), fc.t(got_i), fc.t(got_v), fc.t(row_states),
                                          stream()))
                time_pair("top_k_page_table_transform", cfg,
                          lambda: flashinfer.top_k_page_table_transform(logits, table, lengths, 2048, row_to_batch=r2b),
                          lambda: fc.call("flashcpp_top_k_page_table_transform", fc.t(logits), fc.t(lengths),
                                          fc.t(table), fc.t(r2b), fc.t(got), fc.t(row_states), stream()))
                time_pair("top_k_ragged_transform", cfg,
                          lambda: flashinfer.top_k_ragged_transform(logits, offsets, lengths, 2048),
                          lambda: fc.call("flashcpp_top_k_ragged_transform", fc.t(logits), fc.t(offsets),
                                          fc.t(lengths), fc.t(got), fc.t(row_states), stream()))

    if selected("attention"):
        # Workspaces of FlashInfer's recommended sizes on both sides.
        float_ws_fi = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)
        float_ws = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)
        int_ws = torch.zeros(8 << 20, dtype=torch.uint8, device=dev)
        pinned = torch.zeros(8 << 20, dtype=torch.uint8, pin_memory=True)
        ws = Workspace(C.sizeof(Workspace), C.pointer(view(float_ws)), C.pointer(view(int_ws)), C.pointer(view(pinned)))

        # ---- paged KV: batch 64 x 4096 (decode) / 8 x 1024 (prefill), 32 q / 8 kv heads, d 128, page 16, NHD
        def paged(batch, kv_len, page=16, hkv=8, d=128):
            pages_per = kv_len // page
            k = torch.randn(batch * pages_per, page, hkv, d, device=dev, dtype=bf16)
            v = torch.randn_like(k)
            indices = torch.randperm(batch * pages_per, dtype=torch.int32)
            indptr = torch.arange(0, batch + 1, dtype=torch.int32) * pages_per
            last = torch.full((batch,), page, dtype=torch.int32)
            return k, v, indices, indptr, last

        k, v, indices, indptr, last = paged(64, 4096)
        q = torch.randn(64, 32, 128, device=dev, dtype=bf16)
        kd, ind, lastd = indices.to(dev), indptr.to(dev), last.to(dev)
        for tensor_cores in (False, True):
            name = "batch_decode." + ("tensor_cores_fa2" if tensor_cores else "cuda_cores")
            wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(float_ws_fi, "NHD", use_tensor_cores=tensor_cores,
                                                                    backend="fa2")
            wrapper.plan(ind, kd, lastd, 32, 8, 128, 16, q_data_type=bf16, kv_data_type=bf16)
            want = wrapper.run(q, (k, v))
            cfg = BatchDecodeConfig()
            fc.lib.flashcpp_batch_decode_config_init(C.byref(cfg))
            cfg.num_qo_heads, cfg.num_kv_heads, cfg.head_dim, cfg.page_size = 32, 8, 128, 16
            cfg.backend = 2 if tensor_cores else 1
            cfg.prefill_backend = 1  # fa2
            plan = C.c_void_p()
            fc.call("flashcpp_batch_decode_plan_create", C.byref(cfg), C.byref(ws), fc.t(indptr), fc.t(last),
                    fc.t(indices), stream(), C.byref(plan))
            cache = PagedKvCache(C.sizeof(PagedKvCache), C.pointer(view(k)), C.pointer(view(v)), C.pointer(view(kd)),
                                 C.pointer(view(ind)), C.pointer(view(lastd)), 0)
            got = torch.empty_like(q)
            fc.call("flashcpp_batch_decode_run", plan, fc.t(q), C.byref(cache), fc.t(got), None, stream())
            fc.lib.flashcpp_batch_decode_plan_destroy(plan)
            report(name, want, got, failures)

        k, v, indices, indptr, last = paged(8, 1024)
        q = torch.randn(8 * 1024, 32, 128, device=dev, dtype=bf16)
        qo = torch.arange(0, 9, dtype=torch.int32) * 1024
        kd, ind, lastd, qod = indices.to(dev), indptr.to(dev), last.to(dev), qo.to(dev)
        for backend, code in (("fa2", 1), ("fa3", 2)):
            wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(float_ws_fi, "NHD", backend=backend)
            wrapper.plan(qod, ind, kd, lastd, 32, 8, 128, 16, causal=True, q_data_type=bf16, kv_data_type=bf16)
            want = wrapper.run(q, (k, v))
            cfg = BatchPrefillConfig()
            fc.lib.flashcpp_batch_prefill_config_init(C.byref(cfg))
            cfg.kv_storage, cfg.num_qo_heads, cfg.num_kv_heads, cfg.head_dim_qk, cfg.page_size = 0, 32, 8, 128, 16
            cfg.causal, cfg.backend = 1, code
            plan = C.c_void_p()
            fc.call("flashcpp_batch_prefill_plan_create", C.byref(cfg), C.byref(ws), fc.t(qo), fc.t(indptr), fc.t(last),
                    fc.t(indices), stream(), C.byref(plan))
            cache = PagedKvCache(C.sizeof(PagedKvCache), C.pointer(view(k)), C.pointer(view(v)), C.pointer(view(kd)),
                                 C.pointer(view(ind)), C.pointer(view(lastd)), 0)
            got = torch.empty_like(q)
            fc.call("flashcpp_batch_prefill_run_paged", plan, fc.t(q), C.byref(cache), fc.t(qod), fc.t(got), None,
                    stream())
            fc.lib.flashcpp_batch_prefill_plan_destroy(plan)
            report("batch_prefill_paged." + backend, want, got, failures)

        # ---- batch MLA: 32 requests x 2048 KV, one query each, 128 heads, page 64, bf16
        B, kv_len, H, page = 32, 2048, 128, 64
        pages = B * kv_len // page
        q_nope = torch.randn(B, H, 512, device=dev, dtype=bf16)
        q_pe = torch.randn(B, H, 64, device=dev, dtype=bf16)
        ckv = torch.randn(pages, page, 512, device=dev, dtype=bf16)
        kpe = torch.randn(pages, page, 64, device=dev, dtype=bf16)
        kv_indices = torch.randperm(pages, dtype=torch.int32).to(dev)
        qo = torch.arange(0, B + 1, dtype=torch.int32)
        kvp = torch.arange(0, B + 1, dtype=torch.int32) * (kv_len // page)
        kvl = torch.full((B,), kv_len, dtype=torch.int32)
        scale = 1.0 / math.sqrt(192.0)
        for backend, fi_backend, code in (("fa2", "fa2", 1), ("sm90", "fa3", 2)):
            wrapper = flashinfer.BatchMLAPagedAttentionWrapper(float_ws_fi, backend=fi_backend)
            wrapper.plan(qo.to(dev), kvp.to(dev), kv_indices, kvl.to(dev), H, 512, 64, page, False, scale, bf16, bf16)
            want = wrapper.run(q_nope, q_pe, ckv, kpe)
            cfg = BatchMlaConfig()
            cfg.struct_size = C.sizeof(BatchMlaConfig)
            cfg.num_heads, cfg.page_size, cfg.q_dtype, cfg.kv_dtype = H, page, 1, 1
            cfg.backend, cfg.sm_scale = code, scale
            plan = C.c_void_p()
            fc.call("flashcpp_batch_mla_plan_create", C.byref(cfg), fc.t(float_ws), fc.t(int_ws), fc.t(pinned), fc.t(qo),
                    fc.t(kvp), fc.t(kvl), stream(), C.byref(plan))
            cache = BatchMlaCache(C.sizeof(BatchMlaCache), C.pointer(view(ckv)), C.pointer(view(kpe)),
                                  C.pointer(view(kv_indices)))
            got = torch.empty_like(q_nope)
            fc.call("flashcpp_batch_mla_run", plan, fc.t(q_nope), fc.t(q_pe), C.byref(cache), fc.t(got), None, stream())
            fc.lib.flashcpp_batch_mla_plan_destroy(plan)
            report("batch_mla." + backend, want, got, failures)

    torch.cuda.synchronize()
    print(f"same_module summary: {len(failures)} differing: {' '.join(failures) or '-'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
