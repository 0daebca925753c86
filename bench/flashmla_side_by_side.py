#!/usr/bin/env python3
"""FlashMLA's sparse MLA performance suites, timed beside flashcpp in one process on the very same tensors.

The cases are the performance lists of FlashMLA's tests/test_flash_mla_sparse_decoding.py (plus b 1, 8, 16,
32 and s_q 1 of V3.2) and tests/test_flash_mla_sparse_prefill.py. Inputs are drawn the way FlashMLA's
tests/lib.py draws them (generate_testcase_for_decode, generate_testcase): per-request cache lengths
normal(s_k, s_k / 2), a randomly permuted block table, distinct random indices per query inside its request's
length with -1 padding, NaN in every KV row no index references, attn_sink with +-inf heads, sm_scale
d_qk^-0.55 (decode) or 0.5 (prefill), and every tensor a padded, non-contiguous view (kernelkit's
non_contiguousify: each dim one longer, the last 128 longer); FlashMLA's FP8 pages (V3.2: page stride of
block_size + 1 rows; V4: pages padded to a multiple of 576 bytes). The caches are quantized by flashcpp's
quantizers, which write FlashMLA's bytes.

flashcpp is called through its C ABI (ctypes, libflashcpp.so), FlashMLA through its Python package when it is
importable (this script never builds it). Each call is captured in a CUDA graph; a replay is timed between two
events, after a write of 256 MiB that evicts the L2 (FlashMLA's suite flushes the L2 before each run), median
of --iters; the contenders of a case (flashcpp, --lib-b, FlashMLA) are replayed in turn, the order rotated every
iteration, so none is favoured by when it ran (--sequential: one after the other, ours first). Host time per call:
eager calls back to back, wall time per call (our C ABI call given the stream handle read once before the loop, as a
C++ engine holds it; FlashMLA's Python API with the stream lookup its call makes). One line per case:

  MLA_SUITE {"op": "decode"|"prefill", <case>, "flashmla_us", "flashcpp_us", "ratio" (FlashMLA time / ours),
             "tflops" (ours, FlashMLA's FLOP count), "host_us", "flashmla_host_us", "max_abs_diff", ...}

Prefill from the FP8 cache (--op prefill_fp8): the prefill cases with the KV quantized to FP8 (V3.2 rows, V4 pages),
run by the FP8 decode kernels with one request per query token, beside our bf16 prefill (bf16_over_fp8) and the
cache dequantized then the bf16 prefill over it (ratio = that time / the FP8 time, issue 29's), all in turn.

Dense decode (--op dense): FlashMLA's dense decoding performance cases (tests/test_flash_mla_dense_decoding.py) with
its generator, flashcpp on the bf16 cache (ratio: FlashMLA time / ours) and on the V3.2 FP8 rows quantized from it
(fp8_speedup: our bf16 time / our FP8 time); flashcpp times one layer's run on the step's plan (plan_us apart), as
FlashMLA's replay reuses its scheduler metadata; copy_fraction: bytes moved / time / the copy bandwidth of this run;
host_us: one eager run a layer on the step's plan (both rows), flashmla_host_us: FlashMLA's call with its metadata.
FlashInfer's batch MLA (its module through flashcpp's C ABI, when the runtime finds it; --no-flashinfer: not timed) runs
on the same bf16 cache: flashinfer_us and flashinfer_ratio (its time / ours; on the FP8 rows its bf16 time / our FP8
time), flashinfer_max_abs_diff against our output, or flashinfer_error where it cannot run.
The bf16 contenders (FlashMLA, FlashInfer, ours, --lib-b) and our FP8 rows are replayed in turn (fp8_speedup and the
FP8 row's fp8_in_turn_us from that rotation); the FP8 rows of every build are then timed in a rotation of their own
(the FP8 row's flashcpp_us and the builds' ratios).

Usage: python3 bench/flashmla_side_by_side.py --lib build/libflashcpp.so [--op decode|prefill|dense|all]
       [--filter SUBSTR] [--iters N] [--no-flush] [--no-flashmla] [--lib-b OTHER/libflashcpp.so]
--lib-b loads a second flashcpp build beside the first (an A/B of two builds in one process, on the same tensors);
--lib-env / --lib-b-env give each its switches (the same build twice: e.g. --lib L --lib-b L --lib-b-env
FLASHCPP_MLA_DENSE_KERNEL=gather times the few-heads FP8 kernel against the gather kernels on the FP8 rows, and
FlashMLA, in turn on the same tensors).
--lib-more NAME=PATH ... adds further builds to the same rotation (decode, prefill, dense), each reported as
flashcpp_<NAME>_us, <NAME>_speedup (its time / --lib's) and <NAME>_max_abs_diff: several experiment builds ranked on
the same tensors in one process, FlashMLA beside them.
"""
import argparse
import ctypes
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import weakref

import torch

# ---------------------------------------------------------------------------------------------------------------
# flashcpp's C ABI (include/flashcpp/c/common.h, include/flashcpp/c/mla.h)

MAX_RANK = 6
DTYPES = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2, torch.float64: 3, torch.float8_e4m3fn: 4,
          torch.int8: 6, torch.uint8: 7, torch.int32: 10, torch.int64: 12}


class CTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("rank", ctypes.c_int32), ("shape", ctypes.c_int64 * MAX_RANK),
                ("strides", ctypes.c_int64 * MAX_RANK)]


def ctensor(t):
    """A flashcpp_tensor viewing torch tensor `t` (no copy)."""
    c = CTensor()
    c.data = t.data_ptr()
    c.dtype = DTYPES[t.dtype]
    c.device_type = 2 if t.is_cuda else 1
    c.device_id = t.device.index or 0 if t.is_cuda else 0
    c.rank = t.dim()
    for i, (n, s) in enumerate(zip(t.shape, t.stride())):
        c.shape[i] = n
        c.strides[i] = s
    return c


class Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("sm_scale", ctypes.c_float), ("d_v", ctypes.c_int32)]


class DecodeConfig(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("batch", ctypes.c_int32), ("s_q", ctypes.c_int32),
                ("h_q", ctypes.c_int32), ("d_qk", ctypes.c_int32), ("topk", ctypes.c_int32),
                ("num_sms", ctypes.c_int32), ("device_id", ctypes.c_int32), ("extra_topk", ctypes.c_int32)]


class PlanSizes(ctypes.Structure):
    _fields_ = [("num_sm_parts", ctypes.c_int32), ("split", ctypes.c_int32), ("sched_meta_elems", ctypes.c_int64),
                ("num_splits_elems", ctypes.c_int64), ("lse_accum_elems", ctypes.c_int64),
                ("o_accum_elems", ctypes.c_int64)]


P = ctypes.POINTER(CTensor)


# The bundles of tensors begin with their size (C ABI 4.0.0): each construction passes ctypes.sizeof first.
class DecodeTensors(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32)] + [(n, P) for n in ("q", "kv_cache", "indices", "topk_length", "attn_sink", "out", "lse", "sched_meta",
                                 "num_splits", "lse_accum", "o_accum", "extra_kv_cache", "extra_indices",
                                 "extra_topk_length")]


class PrefillTensors(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32)] + [(n, P) for n in ("q", "kv", "indices", "attn_sink", "topk_length", "out", "max_logits", "lse")]


class DenseConfig(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32)] + [(n, ctypes.c_int32) for n in (
        "batch", "s_q", "h_q", "block_size", "max_blocks", "causal", "num_sms", "device_id")]


class DenseSizes(ctypes.Structure):
    _fields_ = [("num_sm_parts", ctypes.c_int32), ("reserved", ctypes.c_int32)] + [(n, ctypes.c_int64) for n in (
        "sched_meta_elems", "num_splits_elems", "lse_accum_elems", "o_accum_elems", "indices_elems",
        "token_lengths_elems")]


class DenseWorkspace(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32)] + [(n, P) for n in ("sched_meta", "num_splits", "lse_accum", "o_accum", "indices", "token_lengths")]


class DenseTensors(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32)] + [(n, P) for n in ("q", "kv_cache", "attn_sink", "out", "lse")]


class DenseOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("sm_scale", ctypes.c_float)]


# FlashInfer's batch MLA through flashcpp's C ABI (include/flashcpp/c/mla_attention.h).
class BatchMlaConfig(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("num_heads", ctypes.c_int64), ("page_size", ctypes.c_int64),
                ("q_dtype", ctypes.c_int32), ("kv_dtype", ctypes.c_int32), ("causal", ctypes.c_int32),
                ("return_lse_base_on_e", ctypes.c_int32), ("backend", ctypes.c_int32), ("sm_scale", ctypes.c_double)]


class BatchMlaCache(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("ckv_cache", P), ("kpe_cache", P), ("kv_indices", P)]


def current_stream():
    """The current CUDA stream as the C ABI takes it (read at each call: a graph capture runs on its own stream)."""
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


class Flashcpp:
    def __init__(self, path, env=None):
        self.lib = ctypes.CDLL(path)
        self.lib.flashcpp_last_error.restype = ctypes.c_char_p
        self.lib.flashcpp_version.restype = ctypes.c_char_p
        self._keep = []  # the ctypes structs a prepared call points to
        self.env = dict(env or {})  # --lib-env / --lib-b-env: the environment of this build's first calls
        self._warm = False

    def warm(self, fn):
        """Runs fn once; the first time with this build's environment (--lib-env, --lib-b-env), so that the switches
        the library reads once (FLASHCPP_MLA_DENSE_KERNEL, FLASHCPP_MLA_FP8_KERNEL, ...) take that build's values."""
        if self._warm or not self.env:
            fn()
            return
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            fn()
            torch.cuda.synchronize()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            self._warm = True

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"flashcpp {what}: {self.lib.flashcpp_last_error().decode()}")

    def ref(self, t):
        """A pointer to a flashcpp_tensor for `t` (None stays NULL), kept alive with the prepared call."""
        if t is None:
            return None
        c = ctensor(t)
        self._keep.append(c)
        return ctypes.pointer(c)

    def prepare_decode(self, case, q, cache, indices, topk_length, sink, out, lse, extra_cache, extra_indices,
                       extra_topk_length, num_sms=0):
        """Plans once and returns a function that runs one decode on the current stream (num_sms 0: the device's)."""
        cfg = DecodeConfig(ctypes.sizeof(DecodeConfig), q.shape[0], q.shape[1], q.shape[2], q.shape[3],
                           indices.shape[-1], num_sms, q.device.index or 0,
                           extra_indices.shape[-1] if extra_indices is not None else 0)
        sizes = PlanSizes()
        self.check(self.lib.flashcpp_mla_decode_plan(ctypes.byref(cfg), None, None, ctypes.byref(sizes), None), "plan sizes")
        ws = {}
        if sizes.split:
            ws = dict(sched_meta=torch.empty((sizes.num_sm_parts, 8), dtype=torch.int32, device=q.device),
                      num_splits=torch.empty((sizes.num_splits_elems,), dtype=torch.int32, device=q.device),
                      lse_accum=torch.empty((sizes.lse_accum_elems,), dtype=torch.float32, device=q.device),
                      o_accum=torch.empty((sizes.o_accum_elems,), dtype=torch.float32, device=q.device))
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            # The step's lengths balance the schedule (C ABI 3.5.0; an older build plans by the shape alone).
            by_lengths = (topk_length is not None or extra_topk_length is not None) and \
                EXPERIMENT["plan_by_lengths"] and hasattr(self.lib, "flashcpp_mla_decode_plan_by_lengths")
            if by_lengths:
                self.check(self.lib.flashcpp_mla_decode_plan_by_lengths(
                    ctypes.byref(cfg), self.ref(ws["sched_meta"]), self.ref(ws["num_splits"]), self.ref(topk_length),
                    self.ref(extra_topk_length), ctypes.byref(sizes), stream), "plan by lengths")
            else:
                self.check(self.lib.flashcpp_mla_decode_plan(ctypes.byref(cfg), self.ref(ws["sched_meta"]),
                                                             self.ref(ws["num_splits"]), ctypes.byref(sizes), stream),
                           "plan")
        t = DecodeTensors(ctypes.sizeof(DecodeTensors), self.ref(q), self.ref(cache), self.ref(indices),
                          self.ref(topk_length), self.ref(sink), self.ref(out), self.ref(lse),
                          self.ref(ws.get("sched_meta")), self.ref(ws.get("num_splits")),
                          self.ref(ws.get("lse_accum")), self.ref(ws.get("o_accum")), self.ref(extra_cache),
                          self.ref(extra_indices), self.ref(extra_topk_length))
        opts = Options(ctypes.sizeof(Options), case["sm_scale"], 512)
        fn = self.lib.flashcpp_mla_sparse_decode_v4 if q.shape[3] == 512 else self.lib.flashcpp_mla_sparse_decode
        self._keep += [cfg, t, opts, ws]
        args = (ctypes.byref(cfg), ctypes.byref(t), ctypes.byref(opts))

        def run(stream=None):
            self.check(fn(*args, stream if stream is not None else current_stream()), "decode")
        return run, bool(sizes.split)

    def prepare_prefill(self, case, q, kv, indices, sink, topk_length, out, max_logits, lse):
        t = PrefillTensors(ctypes.sizeof(PrefillTensors), self.ref(q), self.ref(kv), self.ref(indices), self.ref(sink),
                           self.ref(topk_length), self.ref(out), self.ref(max_logits), self.ref(lse))
        opts = Options(ctypes.sizeof(Options), case["sm_scale"], 512)
        self._keep += [t, opts]

        def run(stream=None):
            self.check(self.lib.flashcpp_mla_sparse_prefill(ctypes.byref(t), ctypes.byref(opts),
                                                            stream if stream is not None else current_stream()),
                       "prefill")
        return run

    def prepare_dense(self, q, cache, block_table, seqlens, causal, out, lse, num_sms=0):
        """Sizes the workspace; returns (plan, run): plan once per step, run once per layer, on the current stream
        (num_sms 0: the split schedule's parts for the device's SMs)."""
        b, s_q, h_q = q.shape[0], q.shape[1], q.shape[2]
        cfg = DenseConfig(ctypes.sizeof(DenseConfig), b, s_q, h_q, cache.shape[1], block_table.shape[1], int(causal),
                          num_sms, q.device.index or 0)
        sizes = DenseSizes()
        self.check(self.lib.flashcpp_mla_dense_decode_sizes_for(ctypes.byref(cfg), ctypes.byref(sizes)), "dense sizes")
        dev = q.device
        ws = dict(sched_meta=torch.empty((sizes.num_sm_parts, 8), dtype=torch.int32, device=dev),
                  num_splits=torch.empty((sizes.num_splits_elems,), dtype=torch.int32, device=dev),
                  lse_accum=torch.empty((sizes.lse_accum_elems,), dtype=torch.float32, device=dev),
                  o_accum=torch.empty((sizes.o_accum_elems,), dtype=torch.float32, device=dev),
                  indices=torch.empty((sizes.indices_elems,), dtype=torch.int32, device=dev),
                  token_lengths=torch.empty((sizes.token_lengths_elems,), dtype=torch.int32, device=dev))
        w = DenseWorkspace(ctypes.sizeof(DenseWorkspace), *(self.ref(ws[n]) for n, _ in DenseWorkspace._fields_[1:]))
        t = DenseTensors(ctypes.sizeof(DenseTensors), self.ref(q), self.ref(cache), None, self.ref(out), self.ref(lse))
        opts = DenseOptions(ctypes.sizeof(DenseOptions), 0.0)
        table, lens = self.ref(block_table), self.ref(seqlens)
        self._keep += [cfg, w, t, opts, ws, table, lens]

        def plan():
            self.check(self.lib.flashcpp_mla_dense_decode_plan(
                ctypes.byref(cfg), table, lens, ctypes.byref(w), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)),
                "dense plan")

        def run(stream=None):  # stream: read once by host_us's loop, as an engine has its stream at hand
            self.check(self.lib.flashcpp_mla_dense_decode(
                ctypes.byref(cfg), ctypes.byref(t), ctypes.byref(w), ctypes.byref(opts),
                stream if stream is not None else current_stream()), "dense decode")
        return plan, run

    def prepare_batch_mla(self, q, cache, block_table, seqlens, causal, out):
        """FlashInfer's batch MLA (its module, through flashcpp's C ABI, automatic backend) on the dense decode inputs:
        q [b, s_q, h_q, 576] viewed as [b s_q, h_q, 512 | 64], the cache's pages [P, page, 1, 576] as the ckv / kpe
        caches (no copy), each request's used pages from the block table, the same default scale (576^-0.5) and
        causal rule. Plans now (raises where FlashInfer's module or the shape is refused); returns run, writing
        out [b s_q, h_q, 512]. The plan and its workspaces live as long as run."""
        b, s_q, h_q, d = q.shape
        page = cache.shape[1]
        lens = seqlens.to(torch.int64).cpu()
        pages = (lens + page - 1) // page
        kv_indptr = torch.zeros(b + 1, dtype=torch.int32)
        kv_indptr[1:] = torch.cumsum(pages, 0).to(torch.int32)
        kv_indices = torch.cat([block_table[i, :int(pages[i])] for i in range(b)]).to(torch.int32).contiguous()
        qo_indptr = torch.arange(0, (b + 1) * s_q, s_q, dtype=torch.int32)
        kv_len = lens.to(torch.int32)
        dev = q.device
        ws = [torch.empty(128 << 20, dtype=torch.uint8, device=dev), torch.empty(8 << 20, dtype=torch.uint8, device=dev),
              torch.empty(8 << 20, dtype=torch.uint8, pin_memory=True)]
        cfg = BatchMlaConfig(ctypes.sizeof(BatchMlaConfig), h_q, page, DTYPES[q.dtype], DTYPES[cache.dtype], int(causal),
                             1, 0, 0.0)
        keep = [cfg, ws, qo_indptr, kv_indptr, kv_len, kv_indices]
        cref = lambda t: (keep.append(ctensor(t)), ctypes.pointer(keep[-1]))[1]  # noqa: E731
        plan = ctypes.c_void_p()
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.lib.flashcpp_batch_mla_plan_destroy.argtypes = [ctypes.c_void_p]
        self.check(self.lib.flashcpp_batch_mla_plan_create(
            ctypes.byref(cfg), cref(ws[0]), cref(ws[1]), cref(ws[2]), cref(qo_indptr), cref(kv_indptr), cref(kv_len),
            stream, ctypes.byref(plan)), "batch MLA plan")
        torch.cuda.synchronize()  # the plan's copy out of the page-locked workspace
        qf = q.reshape(b * s_q, h_q, d)
        kv = cache[:, :, 0, :]
        tensors = (cref(qf[..., :512]), cref(qf[..., 512:]))
        kv_cache = BatchMlaCache(ctypes.sizeof(BatchMlaCache), cref(kv[..., :512]), cref(kv[..., 512:]), cref(kv_indices))
        out_ref = cref(out)
        keep += [qf, kv, kv_cache, out]
        lib, check = self.lib, self.check

        def run():
            check(lib.flashcpp_batch_mla_run(plan, *tensors, ctypes.byref(kv_cache), out_ref, None,
                                             ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)), "batch MLA run")
        run.keep = keep
        weakref.finalize(run, lib.flashcpp_batch_mla_plan_destroy, plan).atexit = False  # freed with run, not at exit
        return run

    def quantize(self, kv, out, v4):
        fn = self.lib.flashcpp_mla_quantize_kv_cache_fp8_v4 if v4 else self.lib.flashcpp_mla_quantize_kv_cache_fp8
        self.check(fn(self.ref(kv), self.ref(out), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)), "quantize")

    def prepare_dequantize(self, cache, out, v4):
        """The FP8 cache back to bf16 (C ABI 4.1.0); returns the call, on the current stream."""
        fn = self.lib.flashcpp_mla_dequantize_kv_cache_fp8_v4 if v4 else self.lib.flashcpp_mla_dequantize_kv_cache_fp8
        c, o = self.ref(cache), self.ref(out)
        self._keep += [c, o]

        def run():
            self.check(fn(c, o, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)), "dequantize")
        return run


# ---------------------------------------------------------------------------------------------------------------
# Inputs, drawn as FlashMLA's tests/lib.py draws them

def padded(t):
    """kernelkit's non_contiguousify: a copy in storage with every dim one longer and the last 128 longer."""
    shape = list(t.shape)
    big = torch.empty([n + (128 if i == len(shape) - 1 else 1) for i, n in enumerate(shape)], dtype=t.dtype,
                      device=t.device)
    v = big[tuple(slice(0, n) for n in shape)]
    v.copy_(t)
    return v


def randperm_batch(perm_range, perm_size, paddings):
    """Rows of perm_size distinct values in [0, perm_range[i]) in random order; slots past the range take a value
    of `paddings` (FlashMLA's _randperm_batch)."""
    batch = perm_range.numel()
    width = max(int(perm_range.max().item()), perm_size)
    rand = torch.rand(batch, width, device=perm_range.device)
    rand[torch.arange(width, device=rand.device).expand(batch, width) >= perm_range.view(batch, 1)] = float("-inf")
    res = rand.topk(perm_size, dim=-1, sorted=True).indices.to(torch.int32)
    bad = res >= perm_range.view(batch, 1)
    if len(paddings) == 1:
        res[bad] = paddings[0]
    else:
        fill = torch.tensor(paddings, dtype=torch.int32, device=res.device)
        res[bad] = fill[torch.randint(0, len(paddings), (int(bad.sum().item()),), device=res.device)]
    return res


# Experiments (--equal-lengths, --no-permute): FlashMLA's inputs with one of its features turned off.
EXPERIMENT = dict(equal_lengths=False, no_permute=False, host_time=True, num_sms=[], plan_by_lengths=True,
                  sequential=False, flashinfer=True)
# --lib-b: a second flashcpp build (another libflashcpp.so, loaded beside the first) timed on the same tensors.
OTHER_BUILD = dict(lib=None)
# --lib-more: further builds in the same rotation, {name: Flashcpp}.
EXTRA_BUILDS = {}


def kv_scope(flashcpp, b, s_q, s_k, block_size, topk, d_qk, have_topk_length, is_varlen=True):
    """One pool (FlashMLA's generate_one_k_scope): FP8 pages, indices into them and optional per-request lengths."""
    dev = torch.device("cuda")
    seqlens = [s_k] * b
    if is_varlen and not EXPERIMENT["equal_lengths"]:
        seqlens = [max(int(random.normalvariate(s_k, s_k / 2)), s_q) for _ in range(b)]
    align = 4 * block_size
    max_pad = max(-(-max(seqlens) // align), 1) * align
    blocks_per_req = max_pad // block_size
    num_blocks = b * blocks_per_req
    order = torch.arange(num_blocks, device=dev) if EXPERIMENT["no_permute"] else torch.randperm(num_blocks, device=dev)
    block_table = order.to(torch.int32).view(b, blocks_per_req)
    lens = torch.tensor(seqlens, dtype=torch.int32, device=dev)
    abs_idx = randperm_batch(lens.repeat_interleave(s_q), topk, [-1]).view(b, s_q, topk)
    valid = abs_idx >= 0
    a = abs_idx.clamp_min(0).long()
    idx = torch.gather(block_table.long(), 1, (a // block_size).view(b, -1)).view(b, s_q, topk) * block_size + a % block_size
    idx = torch.where(valid, idx, torch.full_like(idx, -1)).to(torch.int32)
    topk_length = torch.randint(0, topk + 1, (b,), dtype=torch.int32, device=dev) if have_topk_length else None
    used_idx = idx
    if topk_length is not None:
        used_idx = torch.where(torch.arange(topk, device=dev).view(1, 1, topk) < topk_length.view(b, 1, 1), idx, -1)
    used = torch.zeros(num_blocks * block_size, dtype=torch.bool, device=dev)
    flat = used_idx.flatten()
    used[flat[flat >= 0].long()] = True

    # FP8 pages in FlashMLA's layout; values randn / 10 clamped to [-1, 1], NaN where no index reads.
    if d_qk == 576:
        page = (block_size + 1) * 656
        token_bytes = 656
    else:
        page = -(-(block_size * 584) // 576) * 576
        token_bytes = 584
    storage = torch.empty(num_blocks * page, dtype=torch.uint8, device=dev)
    cache = torch.as_strided(storage, (num_blocks, block_size, 1, token_bytes), (page, token_bytes, token_bytes, 1))
    chunk = max(1, (1 << 27) // (block_size * d_qk))  # blocks per quantized chunk (256 MiB of bf16)
    for b0 in range(0, num_blocks, chunk):
        b1 = min(num_blocks, b0 + chunk)
        src = (torch.randn((b1 - b0, block_size, 1, d_qk), dtype=torch.bfloat16, device=dev) / 10).clamp_(-1, 1)
        src[~used[b0 * block_size:b1 * block_size].view(b1 - b0, block_size)] = float("nan")
        flashcpp.quantize(src, cache[b0:b1], v4=(d_qk == 512))
    return dict(cache=cache, indices=padded(idx), topk_length=topk_length, lens=seqlens)


def decode_inputs(flashcpp, c):
    dev = torch.device("cuda")
    b, s_q, h_q, d_qk = c["b"], c["s_q"], c["h_q"], c["d_qk"]
    q = torch.randn((b, s_q, h_q, d_qk), device=dev).clamp_(-1, 1).to(torch.bfloat16)
    sink = torch.randn((h_q,), dtype=torch.float32, device=dev)
    mask = torch.randn((h_q,), dtype=torch.float32, device=dev)
    sink[mask > 0.5] = float("inf")
    sink[mask < -0.5] = float("-inf")
    main = kv_scope(flashcpp, b, s_q, c["s_k"], c["block_size"], c["topk"], d_qk, c.get("topk_length", False))
    extra = None
    if c.get("extra_topk"):
        extra = kv_scope(flashcpp, b, s_q, c["extra_s_k"], c["extra_block_size"], c["extra_topk"], d_qk,
                         c.get("extra_topk_length", False))
    return dict(q=padded(q), sink=sink, main=main, extra=extra, sm_scale=d_qk ** -0.55)


def decode_flop(c, inp):
    def attended(scope, topk):
        if scope["topk_length"] is None:
            return c["b"] * c["s_q"] * topk
        return int(scope["topk_length"].sum().item()) * c["s_q"]
    n = attended(inp["main"], c["topk"]) + (attended(inp["extra"], c["extra_topk"]) if inp["extra"] else 0)
    return 2.0 * c["h_q"] * n * (c["d_qk"] + 512)


def prefill_inputs(c):
    dev = torch.device("cuda")
    s_q, s_kv, h_q, d_qk, topk = c["s_q"], c["s_kv"], c["h_q"], c["d_qk"], c["topk"]
    q = (torch.randn((s_q, h_q, d_qk), dtype=torch.bfloat16, device=dev) / 10 + (random.random() - 0.5) / 10).clamp_(-10, 10)
    kv = (torch.randn((s_kv, 1, d_qk), dtype=torch.bfloat16, device=dev) / 10 + (random.random() - 0.5) / 10).clamp_(-10, 10)
    invalid = [-2147483648, -123456, -1, s_kv, 114514, 1919810, 2147480000, 2147483647]
    idx = randperm_batch(torch.full((s_q,), s_kv, dtype=torch.int32, device=dev), topk, invalid).view(s_q, 1, topk)
    sink = torch.randn((h_q,), dtype=torch.float32, device=dev)
    mask = torch.randn((h_q,), dtype=torch.float32, device=dev)
    sink[mask < -0.5] = float("-inf")
    sink[mask > 0.5] = float("inf")
    return dict(q=padded(q), kv=padded(kv), indices=padded(idx), sink=sink, sm_scale=0.5)


# ---------------------------------------------------------------------------------------------------------------
# The suites

def decode_cases():
    cases = []
    v32 = dict(h_q=128, s_q=2, s_k=32768, topk=2048, d_qk=576, block_size=64)
    cases += [dict(v32, name="V3.2", b=b) for b in (1, 2, 8, 16, 32, 64, 74, 128)]
    cases += [dict(v32, name="V3.2 s_q 1", s_q=1, b=b) for b in (1, 128)]
    v4 = dict(s_q=2, s_k=16384, topk=128, d_qk=512, block_size=256, extra_s_k=16384, extra_block_size=64)
    configs = [("V4 config 1", dict(v4, h_q=64, extra_topk=512)),
               ("V4 config 2", dict(v4, h_q=128, extra_topk=1024)),
               ("V4 config 3", dict(v4, h_q=64, extra_topk=1024, extra_block_size=2, extra_topk_length=True)),
               ("V4 config 4", dict(v4, h_q=128, extra_topk=1024, extra_block_size=2, extra_topk_length=True))]
    for name, base in configs:
        cases += [dict(base, name=name, b=b) for b in (2, 64, 74, 128, 148, 256)]
    cases += [dict(name="peak", b=148, h_q=h_q, s_q=2, s_k=32768, topk=16384, d_qk=d_qk, block_size=64)
              for h_q in (64, 128) for d_qk in (512, 576)]
    return cases


def prefill_cases():
    templates = [("V3.2", 576, 128, 2048, (8192, 32768, 65536, 98304, 131072)),
                 ("V4 config 1", 512, 64, 512, (8192, 32768, 49152, 65536)),
                 ("V4 config 2", 512, 128, 1024, (8192, 32768, 49152, 65536))]
    return [dict(name=n, s_q=4096, s_kv=s_kv, h_q=h_q, d_qk=d, topk=k) for n, d, h_q, k, kvs in templates for s_kv in kvs]


def dense_cases():
    """FlashMLA's dense decoding performance cases (tests/test_flash_mla_dense_decoding.py: b 128, varlen, causal and
    not, s_q 1 and 2, s_k 4K..32K), plus tensor-parallel head counts (h_q 16 and 32) at s_q 1."""
    cases = [dict(name="dense", b=128, s_q=s_q, s_k=s_k, h_q=128, causal=causal)
             for causal in (False, True) for s_q in (1, 2) for s_k in (4096, 8192, 16384, 32768)]
    cases += [dict(name="dense tp", b=128, s_q=1, s_k=8192, h_q=h_q, causal=False) for h_q in (16, 32)]
    return cases


def dense_inputs(c, block_size=64, d=576):
    """FlashMLA's generate_test_data: lengths normal(s_k, s_k / 2) at least s_q, a random permutation of the blocks,
    NaN past each request's length, block-table entries past its blocks 2147480000; q and K randn / 10 clamped."""
    b, s_q, h_q, s_k = c["b"], c["s_q"], c["h_q"], c["s_k"]
    lens = [max(int(random.normalvariate(s_k, s_k / 2)), s_q) for _ in range(b)]
    max_pad = (max(lens) + 255) // 256 * 256
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    q = (torch.randn(b, s_q, h_q, d, device="cuda") / 10).clamp_(-1, 1).to(torch.bfloat16)
    nblk = b * max_pad // block_size
    table = torch.randperm(nblk, dtype=torch.int32, device="cuda").view(b, max_pad // block_size)
    k = (torch.randn(nblk, block_size, 1, d, device="cuda", dtype=torch.bfloat16) / 10).clamp_(-1, 1)
    for i, n in enumerate(lens):
        used = (n + block_size - 1) // block_size
        k[table[i, used:].long()] = float("nan")
        if n % block_size:
            k[table[i, used - 1].long(), n % block_size:] = float("nan")
        table[i, used:] = 2147480000
    return dict(q=q, k=k, table=table, seqlens=seqlens, mean_len=sum(lens) / b)


def copy_bandwidth(timer):
    """Device-to-device copy bandwidth in this run (bytes read + written per second): the best of a 2 GiB float32
    copy, its float4 form (torch's vectorized copy) and a bf16 add over the same bytes."""
    n = 512 << 20
    src = torch.rand(n, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    best = min(timer.graph_us(lambda: dst.copy_(src)),
               timer.graph_us(lambda: torch.mul(src, 1.0, out=dst)))
    del src, dst
    return 2 * n * 4 / (best * 1e-6)


def flashmla_dense(flash_mla, q, k, inp, causal):
    """FlashMLA's flash_mla_with_kvcache on (q, k) with metadata of its own, reused across calls as an engine reuses
    it across layers: (the call, its out, its lse) after one call."""
    meta, _ = flash_mla.get_mla_metadata()

    def theirs():
        return flash_mla.flash_mla_with_kvcache(q, k, inp["table"], inp["seqlens"], 512, meta, None, causal=causal)
    out, lse = theirs()
    torch.cuda.synchronize()
    return theirs, out, lse


def run_dense(flashcpp, flash_mla, timer, c):
    """The bf16 cache: FlashMLA, ours and (--lib-b) a second build replayed in turn; then our FP8 rows alone."""
    inp = dense_inputs(c)
    b, s_q, h_q = c["b"], c["s_q"], c["h_q"]
    q, k = inp["q"], inp["k"]
    rec = dict(op="dense_decode", case=c["name"], b=b, s_q=s_q, h_q=h_q, s_k=c["s_k"], causal=c["causal"],
               mean_len=inp["mean_len"])
    flop = b * h_q * s_q * (2 * 576 + 2 * 512) * inp["mean_len"]
    copy_bw = EXPERIMENT.setdefault("copy_bw", None) or copy_bandwidth(timer)
    EXPERIMENT["copy_bw"] = copy_bw
    fp8 = torch.empty((k.shape[0], k.shape[1], 1, 656), dtype=torch.uint8, device="cuda")
    flashcpp.quantize(k, fp8, False)
    ref_out = ref_lse = None
    bf16_contenders = {}
    bf16_theirs = None
    if flash_mla is not None:
        bf16_theirs, ref_out, ref_lse = flashmla_dense(flash_mla, q, k, inp, c["causal"])
        bf16_contenders["flashmla_us"] = bf16_theirs
    out_fi = None
    if EXPERIMENT["flashinfer"]:  # FlashInfer's batch MLA on the same bf16 cache, in the same rotation
        out_fi = torch.empty((b * s_q, h_q, 512), dtype=torch.bfloat16, device="cuda")
        try:
            run_fi = flashcpp.prepare_batch_mla(q, k, inp["table"], inp["seqlens"], c["causal"], out_fi)
            run_fi()
            torch.cuda.synchronize()
            probe = torch.cuda.CUDAGraph()  # the rotation replays a captured call
            with torch.cuda.graph(probe):
                run_fi()
            del probe
            bf16_contenders["flashinfer_us"] = run_fi
        except RuntimeError as e:  # no batch_mla module here, or a shape FlashInfer refuses
            rec["flashinfer_error"] = str(e).splitlines()[0][:300]
            out_fi = None
    outputs = {}

    def prepare(lib, cache, query=q, num_sms=0):
        out = torch.empty((b, s_q, h_q, 512), dtype=query.dtype, device="cuda")
        lse = torch.empty((b, h_q, s_q), dtype=torch.float32, device="cuda")
        plan, run = lib.prepare_dense(query, cache, inp["table"], inp["seqlens"], c["causal"], out, lse.transpose(1, 2),
                                      num_sms=num_sms)
        plan()
        lib.warm(run)
        return plan, run, out, lse

    plan_bf16, run_bf16, out_bf16, lse_bf16 = prepare(flashcpp, k)
    bf16_contenders["flashcpp_us"] = run_bf16  # per layer, on the step's plan (FlashMLA reuses its metadata so too)
    # Our FP8 rows in the same rotation too, so that fp8_speedup (issue 30's FP8 / bf16) compares two times taken
    # under the same conditions (a rotation's size moved a memory-bound case by 15%, docs/PERFORMANCE.md).
    prepared_fp8 = prepare(flashcpp, fp8)
    bf16_contenders["flashcpp_fp8_in_turn_us"] = prepared_fp8[1]
    if OTHER_BUILD["lib"] is not None:
        _, run_b, out_b, _ = prepare(OTHER_BUILD["lib"], k)
        bf16_contenders["flashcpp_b_us"] = run_b
        outputs["b"] = out_b
    extra_bf16 = {}  # {name: (run, out, lse)}
    for name, lib in EXTRA_BUILDS.items():
        extra_bf16[name] = prepare(lib, k)[1:]
        bf16_contenders[f"flashcpp_{name}_us"] = extra_bf16[name][0]
    for n in EXPERIMENT["num_sms"]:  # the same tensors planned for n SMs' parts, in the same rotation
        extra_bf16[f"sms{n}"] = prepare(flashcpp, k, num_sms=n)[1:]
        bf16_contenders[f"flashcpp_sms{n}_us"] = extra_bf16[f"sms{n}"][0]
    times = timer.time_contenders(bf16_contenders)
    fp8_in_turn_us = times.pop("flashcpp_fp8_in_turn_us")
    rows = []
    for kind in ("bf16", "fp8"):
        if kind == "bf16":
            plan, run, out, lse = plan_bf16, run_bf16, out_bf16, lse_bf16
            r = dict(rec, kv=kind, **times)
            extra_runs = extra_bf16
        else:
            plan, run, out, lse = prepared_fp8
            fp8_contenders = {"flashcpp_us": run}
            if OTHER_BUILD["lib"] is not None:  # the other build on the same FP8 rows, in turn
                _, run_b, outputs["b"], _ = prepare(OTHER_BUILD["lib"], fp8)
                fp8_contenders["flashcpp_b_us"] = run_b
            extra_runs = {}
            for name, lib in EXTRA_BUILDS.items():
                extra_runs[name] = prepare(lib, fp8)[1:]
                fp8_contenders[f"flashcpp_{name}_us"] = extra_runs[name][0]
            r = dict(rec, kv=kind, **timer.time_contenders(fp8_contenders))
            for other in ("flashmla_us", "flashinfer_us"):  # the bf16 contenders' times, beside our FP8 rows
                if other in times:
                    r[other] = times[other]
        r["plan_us"] = timer.graph_us(plan)
        plan()
        run()
        torch.cuda.synchronize()
        if EXPERIMENT["host_time"]:  # one eager call per layer on the step's plan; FlashMLA's with its metadata
            r["host_us"] = timer.host_us(run, stream_arg=True)
            if kind == "bf16" and flash_mla is not None:
                r["flashmla_host_us"] = timer.host_us(bf16_theirs)
        kv_bytes = 576 * 2 if kind == "bf16" else 656
        moved = b * (inp["mean_len"] * kv_bytes + s_q * h_q * (576 + 512) * 2)
        r["tflops"] = flop / (r["flashcpp_us"] * 1e-6) / 1e12
        r["copy_fraction"] = moved / (r["flashcpp_us"] * 1e-6) / copy_bw
        r["copy_tb_s"] = copy_bw / 1e12
        if ref_out is not None:
            r["max_abs_diff"], r["nonfinite_mismatch"] = diff(out, ref_out)
            r["lse_max_abs_diff"], _ = diff(lse, ref_lse)
            if kind == "bf16":
                r["ratio"] = r["flashmla_us"] / r["flashcpp_us"]
        if "flashinfer_us" in r:
            r["flashinfer_ratio"] = r["flashinfer_us"] / r["flashcpp_us"]
            if kind == "bf16":
                r["flashinfer_max_abs_diff"], r["flashinfer_nonfinite_mismatch"] = diff(out_fi.view_as(out), out)
        if "flashcpp_b_us" in r:
            r["b_max_abs_diff"], r["b_nonfinite_mismatch"] = diff(outputs["b"], out)
            r["b_speedup"] = r["flashcpp_b_us"] / r["flashcpp_us"]
        compare_extra_builds(r, run, out, extra_runs)
        rows.append(r)
    # FP8 / bf16 from the bf16 rotation (both there); the FP8 row's own time is its rotation with the other builds'.
    rows[1]["fp8_in_turn_us"] = fp8_in_turn_us
    rows[1]["fp8_speedup"] = rows[0]["flashcpp_us"] / fp8_in_turn_us
    if EXPERIMENT.get("dense_fp16"):
        rows.append(run_dense_fp16(flashcpp, flash_mla, timer, c, inp, rec, prepare))
    return rows


def run_dense_fp16(flashcpp, flash_mla, timer, c, inp, rec, prepare):
    """--dense-fp16: the same case in fp16 (q and cache converted, NaN kept), FlashMLA and ours in turn."""
    b, s_q, h_q = c["b"], c["s_q"], c["h_q"]
    q16, k16 = inp["q"].half(), inp["k"].half()
    contenders = {}
    ref_out = ref_lse = None
    if flash_mla is not None:
        contenders["flashmla_us"], ref_out, ref_lse = flashmla_dense(flash_mla, q16, k16, inp, c["causal"])
    plan, run, out, lse = prepare(flashcpp, k16, q16)
    contenders["flashcpp_us"] = run
    r = dict(rec, kv="fp16", **timer.time_contenders(contenders))
    r["plan_us"] = timer.graph_us(plan)
    plan()
    run()
    torch.cuda.synchronize()
    flop = b * h_q * s_q * (2 * 576 + 2 * 512) * inp["mean_len"]
    moved = b * (inp["mean_len"] * 576 * 2 + s_q * h_q * (576 + 512) * 2)
    r["tflops"] = flop / (r["flashcpp_us"] * 1e-6) / 1e12
    r["copy_fraction"] = moved / (r["flashcpp_us"] * 1e-6) / EXPERIMENT["copy_bw"]
    if ref_out is not None:
        r["max_abs_diff"], r["nonfinite_mismatch"] = diff(out, ref_out)
        r["lse_max_abs_diff"], _ = diff(lse, ref_lse)
        r["ratio"] = r["flashmla_us"] / r["flashcpp_us"]
    return r


class Timer:
    def __init__(self, iters, flush):
        self.iters = iters
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda") if flush else None

    def graph_us(self, fn):
        """Median time of a CUDA-graph replay of fn (L2 evicted before each replay unless --no-flush)."""
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        start = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        end = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        for i in range(self.iters):
            if self.flush is not None:
                self.flush.fill_(i & 0xFF)
            start[i].record()
            g.replay()
            end[i].record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) * 1e3 for s, e in zip(start, end)]
        del g
        return statistics.median(times)

    def graph_us_interleaved(self, fns):
        """Median replay time of each of fns ({name: fn}), their CUDA graphs replayed in turn: every iteration replays
        each graph once (L2 evicted before each replay unless --no-flush), the order rotated by one each iteration.
        Contenders timed one after the other differ by the machine's state at their turn (clocks, what ran before:
        identical builds measured up to 6% apart by their order); in turn, each sees the same."""
        graphs = {}
        for name, fn in fns.items():
            fn()
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            graphs[name] = g
        for _ in range(3):
            for g in graphs.values():
                g.replay()
        torch.cuda.synchronize()
        names = list(graphs)
        marks = {n: [] for n in names}
        for i in range(self.iters):
            k = i % len(names)
            for n in names[k:] + names[:k]:
                if self.flush is not None:
                    self.flush.fill_(i & 0xFF)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graphs[n].replay()
                end.record()
                marks[n].append((start, end))
        torch.cuda.synchronize()
        times = {n: statistics.median(s.elapsed_time(e) * 1e3 for s, e in marks[n]) for n in names}
        del graphs
        return times

    def time_contenders(self, fns):
        """{name: median us}: in turn (graph_us_interleaved), or one after the other with --sequential."""
        if EXPERIMENT["sequential"]:
            return {n: self.graph_us(fn) for n, fn in fns.items()}
        return self.graph_us_interleaved(fns)

    @staticmethod
    def host_us(fn, calls=30, stream_arg=False):
        """Host time of one eager call: calls back to back, wall time per call. stream_arg (our C ABI calls): the
        stream handle is read once, before the loop, and passed to each call; reading it from PyTorch is the harness's
        own cost (1-2 us of Python a call), not the call's, which a C or C++ engine makes with its stream at hand.
        FlashMLA's Python API finds its stream inside its own call, so its time keeps that."""
        if stream_arg:
            stream, run = current_stream(), fn
            fn = lambda: run(stream)  # noqa: E731
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best = min(best, (time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
        return best


def diff(a, b):
    a, b = a.float(), b.float()
    finite = torch.isfinite(a) & torch.isfinite(b)
    same_inf = (a == b) & ~finite
    bad = int((~finite & ~same_inf).sum().item())
    d = (a - b).abs()[finite]
    return (float(d.max().item()) if d.numel() else 0.0), bad


def compare_other_build(rec, ours, out, theirs_b, out_b):
    """--lib-b: the second build's output against ours (each run once more, ours last) and its time against ours."""
    theirs_b()
    ours()
    torch.cuda.synchronize()
    rec["b_max_abs_diff"], rec["b_nonfinite_mismatch"] = diff(out, out_b)
    rec["b_speedup"] = rec["flashcpp_b_us"] / rec["flashcpp_us"]


def compare_extra_builds(rec, ours, out, runs):
    """--lib-more: each build's output against ours (each run once more, ours last) and its time against ours.
    runs: {name: (run, out, the other tensors its call writes: kept alive with it)}."""
    for name, (run, out_x, *_) in runs.items():
        run()
        ours()
        torch.cuda.synchronize()
        rec[f"{name}_max_abs_diff"], rec[f"{name}_nonfinite_mismatch"] = diff(out, out_x)
        rec[f"{name}_speedup"] = rec[f"flashcpp_{name}_us"] / rec["flashcpp_us"]


def prepare_ours(lib, inp, out, lse, num_sms=0):
    """A flashcpp build's decode on the decode inputs, into out and lse (FlashMLA's [b, h_q, s_q]): (run, split)."""
    main, extra = inp["main"], inp["extra"]
    return lib.prepare_decode(inp, inp["q"], main["cache"], main["indices"], main["topk_length"], inp["sink"], out,
                              lse.transpose(1, 2), extra and extra["cache"], extra and extra["indices"],
                              extra and extra["topk_length"], num_sms=num_sms)


def decode_calls(flashcpp, flash_mla, inp, out, lse):
    """Ours planned on the decode inputs (returns run, split) and FlashMLA's call on the same tensors (None without
    FlashMLA; its scheduler metadata computed once, as in FlashMLA's own suite and as an engine reuses it)."""
    main, extra = inp["main"], inp["extra"]
    ours, split = prepare_ours(flashcpp, inp, out, lse)
    if flash_mla is None:
        return ours, split, None
    meta, _ = flash_mla.get_mla_metadata()

    def theirs():
        return flash_mla.flash_mla_with_kvcache(
            inp["q"], main["cache"], None, None, 512, meta, None, inp["sm_scale"], False, True, main["indices"],
            inp["sink"], extra and extra["cache"], extra and extra["indices"], main["topk_length"],
            extra and extra["topk_length"])
    return ours, split, theirs


def profile_order(flashcpp, flash_mla, timer, c, repeats=3):
    """--profile-order (for Nsight Compute, nothing timed here): `repeats` rounds of [L2 flush, ours] and then of
    [L2 flush, FlashMLA, ours], so a profiler that records only our kernels (e.g. ncu --cache-control none -k
    regex:sparse_attention) sees ours first after itself, then after FlashMLA's kernel. What differs between the two
    halves is the state FlashMLA leaves in the SMs (instruction and constant caches) and in the L2."""
    inp = decode_inputs(flashcpp, c)
    b, s_q, h_q = c["b"], c["s_q"], c["h_q"]
    out = torch.empty((b, s_q, h_q, 512), dtype=torch.bfloat16, device="cuda")
    lse = torch.empty((b, h_q, s_q), dtype=torch.float32, device="cuda")
    ours, _, theirs = decode_calls(flashcpp, flash_mla, inp, out, lse)
    theirs()  # FlashMLA's scheduler metadata, once (launches its metadata kernel)
    torch.cuda.synchronize()
    for before in (None, theirs):
        for i in range(repeats):
            timer.flush.fill_(i & 0xFF)
            if before is not None:
                before()
            ours()
            torch.cuda.synchronize()
    return dict(op="profile_order", case=c["name"], b=b, s_q=s_q, h_q=h_q, repeats=repeats)


def run_decode(flashcpp, flash_mla, timer, c):
    if EXPERIMENT.get("profile_order"):
        return profile_order(flashcpp, flash_mla, timer, c)
    inp = decode_inputs(flashcpp, c)
    b, s_q, h_q = c["b"], c["s_q"], c["h_q"]
    out = torch.empty((b, s_q, h_q, 512), dtype=torch.bfloat16, device="cuda")
    lse = torch.empty((b, h_q, s_q), dtype=torch.float32, device="cuda")  # FlashMLA's layout
    ours, split, theirs = decode_calls(flashcpp, flash_mla, inp, out, lse)
    rec = dict(op="decode", case=c["name"], b=b, s_q=s_q, h_q=h_q, d_qk=c["d_qk"], topk=c["topk"],
               extra_topk=c.get("extra_topk", 0), block_size=c["block_size"],
               extra_block_size=c.get("extra_block_size", 0), topk_length=bool(c.get("topk_length")),
               extra_topk_length=bool(c.get("extra_topk_length")), split=split,
               plan_by_lengths=bool(split and EXPERIMENT["plan_by_lengths"] and (c.get("topk_length") or c.get("extra_topk_length"))))
    flop = decode_flop(c, inp)
    contenders = {"flashcpp_us": ours}
    theirs_b = None
    if OTHER_BUILD["lib"] is not None:  # the same tensors through a second build, outputs compared with ours
        out_b, lse_b = torch.empty_like(out), torch.empty_like(lse)
        theirs_b, _ = prepare_ours(OTHER_BUILD["lib"], inp, out_b, lse_b)
        contenders["flashcpp_b_us"] = theirs_b
    extra_runs = {}
    for name, lib in EXTRA_BUILDS.items():
        out_x, lse_x = torch.empty_like(out), torch.empty_like(lse)
        extra_runs[name] = (prepare_ours(lib, inp, out_x, lse_x)[0], out_x, lse_x)
        contenders[f"flashcpp_{name}_us"] = extra_runs[name][0]
    if theirs is not None:
        ref_out, ref_lse = theirs()
        contenders["flashmla_us"] = theirs
    rec.update(timer.time_contenders(contenders))
    if theirs_b is not None:
        compare_other_build(rec, ours, out, theirs_b, out_b)
    compare_extra_builds(rec, ours, out, extra_runs)
    for n in EXPERIMENT["num_sms"]:  # the same tensors planned for n SMs (the split schedule's parts)
        out_n = torch.empty_like(out)
        ours_n, split_n = prepare_ours(flashcpp, inp, out_n, torch.empty_like(lse), num_sms=n)
        rec.setdefault("num_sms_us", {})[str(n)] = [round(timer.graph_us(ours_n), 2), split_n]
    if EXPERIMENT["host_time"]:
        rec["host_us"] = timer.host_us(ours, stream_arg=True)
    rec["tflops"] = flop / (rec["flashcpp_us"] * 1e-6) / 1e12
    if flash_mla is not None:
        ours()
        torch.cuda.synchronize()
        rec["max_abs_diff"], rec["nonfinite_mismatch"] = diff(out, ref_out)
        rec["lse_max_abs_diff"], _ = diff(lse, ref_lse)
        if EXPERIMENT["host_time"]:
            rec["flashmla_host_us"] = timer.host_us(theirs)
        rec["ratio"] = rec["flashmla_us"] / rec["flashcpp_us"]
    return rec


def run_prefill(flashcpp, flash_mla, timer, c):
    inp = prefill_inputs(c)
    s_q, h_q = c["s_q"], c["h_q"]
    out = torch.empty((s_q, h_q, 512), dtype=torch.bfloat16, device="cuda")
    max_logits = torch.empty((s_q, h_q), dtype=torch.float32, device="cuda")
    lse = torch.empty((s_q, h_q), dtype=torch.float32, device="cuda")
    ours = flashcpp.prepare_prefill(inp, inp["q"], inp["kv"], inp["indices"], inp["sink"], None, out, max_logits, lse)
    rec = dict(op="prefill", case=c["name"], s_q=s_q, s_kv=c["s_kv"], h_q=h_q, d_qk=c["d_qk"], topk=c["topk"])
    flop = 2.0 * s_q * c["topk"] * h_q * (c["d_qk"] + 512)
    contenders = {"flashcpp_us": ours}
    theirs_b = None
    if OTHER_BUILD["lib"] is not None:
        out_b, max_logits_b, lse_b = torch.empty_like(out), torch.empty_like(max_logits), torch.empty_like(lse)
        theirs_b = OTHER_BUILD["lib"].prepare_prefill(inp, inp["q"], inp["kv"], inp["indices"], inp["sink"], None, out_b,
                                                      max_logits_b, lse_b)  # alive while the call is timed
        contenders["flashcpp_b_us"] = theirs_b
    extra_runs = {}
    for name, lib in EXTRA_BUILDS.items():
        out_x, max_logits_x, lse_x = torch.empty_like(out), torch.empty_like(max_logits), torch.empty_like(lse)
        run_x = lib.prepare_prefill(inp, inp["q"], inp["kv"], inp["indices"], inp["sink"], None, out_x, max_logits_x,
                                    lse_x)
        extra_runs[name] = (run_x, out_x, max_logits_x, lse_x)
        contenders[f"flashcpp_{name}_us"] = run_x
    if flash_mla is not None:
        def theirs():
            return flash_mla.flash_mla_sparse_fwd(inp["q"], inp["kv"], inp["indices"], sm_scale=inp["sm_scale"],
                                                  attn_sink=inp["sink"], topk_length=None)
        ref_out, ref_ml, ref_lse = theirs()
        contenders["flashmla_us"] = theirs
    rec.update(timer.time_contenders(contenders))
    if theirs_b is not None:
        compare_other_build(rec, ours, out, theirs_b, out_b)
    compare_extra_builds(rec, ours, out, extra_runs)
    if EXPERIMENT["host_time"]:
        rec["host_us"] = timer.host_us(ours, calls=10, stream_arg=True)
    rec["tflops"] = flop / (rec["flashcpp_us"] * 1e-6) / 1e12
    if flash_mla is not None:
        ours()
        torch.cuda.synchronize()
        rec["max_abs_diff"], rec["nonfinite_mismatch"] = diff(out, ref_out)
        rec["lse_max_abs_diff"], _ = diff(lse, ref_lse)
        if EXPERIMENT["host_time"]:
            rec["flashmla_host_us"] = timer.host_us(theirs, calls=10)
        rec["flashmla_tflops"] = flop / (rec["flashmla_us"] * 1e-6) / 1e12
        rec["ratio"] = rec["flashmla_us"] / rec["flashcpp_us"]
    return rec


def run_prefill_fp8(flashcpp, flash_mla, timer, c):
    """Prefill straight from the FP8 cache, as an engine can run it today: the FP8 decode kernels with one request per
    query token (batch s_q, s_q 1, the token's indices), beside our bf16 sparse prefill on the same indices over the
    bf16 rows the cache was quantized from (the V3.2 656-byte rows, or V4 pages of 584 bytes; block size 64). Both
    timed in turn; bf16_over_fp8 = bf16 prefill time / FP8 time (an engine that keeps only the FP8 cache would
    also dequantize the referenced rows before the bf16 prefill)."""
    inp = prefill_inputs(c)
    s_q, h_q, d_qk, s_kv = c["s_q"], c["h_q"], c["d_qk"], c["s_kv"]
    dev = torch.device("cuda")
    out = torch.empty((s_q, h_q, 512), dtype=torch.bfloat16, device=dev)
    max_logits = torch.empty((s_q, h_q), dtype=torch.float32, device=dev)
    lse = torch.empty((s_q, h_q), dtype=torch.float32, device=dev)
    bf16 = flashcpp.prepare_prefill(inp, inp["q"], inp["kv"], inp["indices"], inp["sink"], None, out, max_logits, lse)
    block = 64
    rows = inp["kv"].contiguous().view(s_kv // block, block, 1, d_qk)
    if d_qk == 576:
        cache = torch.empty((s_kv // block, block, 1, 656), dtype=torch.uint8, device=dev)
    else:  # FlashMLA's V4 page: 64 token records and their scales, rounded up to 576 bytes
        page = -(-(block * 584) // 576) * 576
        storage = torch.empty((s_kv // block) * page, dtype=torch.uint8, device=dev)
        cache = torch.as_strided(storage, (s_kv // block, block, 1, 584), (page, 584, 584, 1))
    flashcpp.quantize(rows, cache, v4=(d_qk == 512))
    out8 = torch.empty((s_q, 1, h_q, 512), dtype=torch.bfloat16, device=dev)
    lse8 = torch.empty((s_q, 1, h_q), dtype=torch.float32, device=dev)
    fp8, split = flashcpp.prepare_decode(inp, inp["q"].unsqueeze(1), cache, inp["indices"], None, inp["sink"], out8,
                                         lse8, None, None, None)
    # What an engine that keeps only the FP8 cache runs today: the cache back to bf16, then the bf16 prefill over it
    # (the decode indices address the dequantized rows unchanged).
    dq_kv = torch.empty((s_kv // block, block, 1, d_qk), dtype=torch.bfloat16, device=dev)
    dequantize = flashcpp.prepare_dequantize(cache, dq_kv, v4=(d_qk == 512))
    out_dq, max_logits_dq, lse_dq = torch.empty_like(out), torch.empty_like(max_logits), torch.empty_like(lse)
    prefill_dq = flashcpp.prepare_prefill(inp, inp["q"], dq_kv.view(s_kv, 1, d_qk), inp["indices"], inp["sink"], None,
                                          out_dq, max_logits_dq, lse_dq)

    def dequant_bf16():
        dequantize()
        prefill_dq()
    rec = dict(op="prefill_fp8", case=c["name"], s_q=s_q, s_kv=s_kv, h_q=h_q, d_qk=d_qk, topk=c["topk"], split=split)
    rec.update(timer.time_contenders({"bf16_prefill_us": bf16, "fp8_us": fp8, "dequant_bf16_us": dequant_bf16,
                                      "dequantize_us": dequantize}))
    bf16()
    fp8()
    torch.cuda.synchronize()
    rec["max_abs_diff"], rec["nonfinite_mismatch"] = diff(out8.view(s_q, h_q, 512), out)
    rec["lse_max_abs_diff"], _ = diff(lse8.view(s_q, h_q), lse)
    flop = 2.0 * s_q * c["topk"] * h_q * (d_qk + 512)
    rec["fp8_tflops"] = flop / (rec["fp8_us"] * 1e-6) / 1e12
    rec["bf16_over_fp8"] = rec["bf16_prefill_us"] / rec["fp8_us"]
    # Issue 29's ratio: (our dequantize + bf16 prefill) / (prefill from the FP8 cache).
    rec["ratio"] = rec["dequant_bf16_us"] / rec["fp8_us"]
    dequant_bf16()
    torch.cuda.synchronize()
    rec["dequant_vs_fp8_max_abs_diff"], _ = diff(out_dq, out8.view(s_q, h_q, 512))
    rec["dequantize_gbps"] = (dq_kv.numel() * 2 + cache.numel()) / (rec["dequantize_us"] * 1e-6) / 1e9
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True, help="libflashcpp.so")
    ap.add_argument("--op", choices=("decode", "prefill", "dense", "prefill_fp8", "all"), default="all")
    ap.add_argument("--filter", nargs="*", default=[],
                    help="only cases whose label (e.g. 'V4 config 1 b 74 s_q 2 h_q 64 d_qk 512') contains one of these")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-flush", action="store_true", help="do not evict the L2 before each timed replay")
    ap.add_argument("--no-flashmla", action="store_true", help="time flashcpp alone")
    ap.add_argument("--no-host-time", action="store_true", help="skip the eager host-time loops (e.g. under a profiler)")
    ap.add_argument("--no-flashinfer", action="store_true",
                    help="dense decode without FlashInfer's batch MLA beside it (flashinfer_us, flashinfer_ratio)")
    ap.add_argument("--dense-fp16", action="store_true",
                    help="dense decode: also each case in fp16 (q and cache), FlashMLA and ours in turn (kv 'fp16')")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sequential", action="store_true",
                    help="time the contenders one after the other (ours first), as before 2026-12-04, not in turn")
    ap.add_argument("--lib-b", help="a second libflashcpp.so timed on the same tensors (flashcpp_b_us, b_speedup: "
                    "its time / the first's; decode, prefill and dense bf16); the same file as --lib is loaded as a "
                    "copy, so that with --lib-b-env the two differ by a switch")
    ap.add_argument("--lib-env", nargs="*", default=[], metavar="NAME=VALUE",
                    help="environment of --lib's first calls (dense decode), e.g. FLASHCPP_MLA_DENSE_KERNEL=gather")
    ap.add_argument("--lib-b-env", nargs="*", default=[], metavar="NAME=VALUE",
                    help="environment of --lib-b's first calls, e.g. FLASHCPP_MLA_DENSE_KERNEL=gather")
    ap.add_argument("--lib-more", nargs="*", default=[], metavar="NAME=PATH",
                    help="further libflashcpp.so builds in the same rotation (decode, prefill, dense): "
                         "flashcpp_<NAME>_us, <NAME>_speedup (its time / --lib's), <NAME>_max_abs_diff")
    ap.add_argument("--equal-lengths", action="store_true", help="experiment: every request's cache length s_k")
    ap.add_argument("--no-permute", action="store_true", help="experiment: an identity block table")
    ap.add_argument("--plan-without-lengths", action="store_true",
                    help="experiment: plan decode by the shape alone where the case has lengths")
    ap.add_argument("--profile-order", action="store_true",
                    help="experiment: decode cases launched untimed for a profiler, ours after ours, then after FlashMLA")
    ap.add_argument("--num-sms", type=int, nargs="*", default=[],
                    help="experiment: decode also planned for each of these SM counts (num_sms_us: {n: [us, split]}); "
                         "dense bf16 too, as contenders flashcpp_sms<n>_us with sms<n>_speedup")
    args = ap.parse_args()
    EXPERIMENT.update(equal_lengths=args.equal_lengths, no_permute=args.no_permute, host_time=not args.no_host_time,
                      num_sms=args.num_sms, plan_by_lengths=not args.plan_without_lengths,
                      sequential=args.sequential, profile_order=args.profile_order, flashinfer=not args.no_flashinfer,
                      dense_fp16=args.dense_fp16)

    def env_of(pairs):
        return dict(p.split("=", 1) for p in pairs)
    flashcpp = Flashcpp(args.lib, env_of(args.lib_env))
    loaded = {os.path.realpath(args.lib)}

    def distinct(path):  # one file loads once: a build given twice is loaded from a copy
        real = os.path.realpath(path)
        if real in loaded:
            copy_dir = tempfile.mkdtemp(prefix="flashcpp-lib-copy-")
            path = os.path.join(copy_dir, os.path.basename(real))
            shutil.copy2(real, path)
        loaded.add(os.path.realpath(path))
        return path
    if args.lib_b:
        OTHER_BUILD["lib"] = Flashcpp(distinct(args.lib_b), env_of(args.lib_b_env))
    for spec in args.lib_more:
        name, _, path = spec.partition("=")
        if not name.isidentifier() or not path or name in EXTRA_BUILDS or name == "b":
            ap.error(f"--lib-more takes NAME=PATH with distinct identifier names other than b, got {spec!r}")
        EXTRA_BUILDS[name] = Flashcpp(distinct(path), {})
    flash_mla = None
    if not args.no_flashmla:
        try:
            import flash_mla  # noqa: F401  (FlashMLA's package, when installed)
        except ImportError as e:
            print(f"FlashMLA not importable ({e}): timing flashcpp alone", file=sys.stderr)
            flash_mla = None
    print(f"# {flashcpp.lib.flashcpp_version().decode()}; {torch.cuda.get_device_name()}; "
          f"FlashMLA {'present' if flash_mla else 'absent'}; L2 flush {'off' if args.no_flush else 'on'}; "
          f"experiment {EXPERIMENT}", flush=True)
    timer = Timer(args.iters, not args.no_flush)
    jobs = []
    if args.op in ("decode", "all"):
        jobs += [(run_decode, c) for c in decode_cases()]
    if args.op in ("prefill", "all"):
        jobs += [(run_prefill, c) for c in prefill_cases()]
    if args.op in ("dense", "all"):
        jobs += [(run_dense, c) for c in dense_cases()]
    if args.op == "prefill_fp8":
        jobs += [(run_prefill_fp8, c) for c in prefill_cases()]
    ratios = {}
    with torch.inference_mode():
        for fn, c in jobs:
            label = " ".join([c["name"]] + [f"{k} {c[k]}" for k in ("b", "s_q", "h_q", "d_qk", "s_kv", "s_k", "causal")
                                             if k in c])
            if args.filter and not any(f in label for f in args.filter):
                continue
            random.seed(args.seed)
            torch.manual_seed(args.seed)
            recs = fn(flashcpp, flash_mla, timer, c)
            for rec in recs if isinstance(recs, list) else [recs]:
                print("MLA_SUITE " + json.dumps(rec), flush=True)
                if "ratio" in rec:
                    ratios.setdefault(rec["op"], []).append(rec["ratio"])
            torch.cuda.empty_cache()
    for op, r in ratios.items():
        gm = math.exp(sum(math.log(x) for x in r) / len(r))
        print(f"# {op}: {len(r)} cases, geometric mean ratio {gm:.3f}, min {min(r):.3f}, "
              f"{sum(x >= 1.0 for x in r)} at or above 1.0", flush=True)


if __name__ == "__main__":
    main()
