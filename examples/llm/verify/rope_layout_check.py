"""Which RoPE layout do the GGUF's raw attn_q/attn_k weights need?

llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel.permute) reorders the
rows of each Q/K head from Hugging Face's rotate-half layout, where dimension i
pairs with i + head_dim/2, to GGML's "normal" RoPE layout, where dimensions
(2i, 2i+1) are rotated together. transformers undoes that when it loads a GGUF
(modeling_gguf_pytorch_utils.LlamaTensorProcessor._reverse_permute_weights:
reshape(n_head, 2, dim/2) -> swap -> reshape) and then applies rotate-half.

So an engine that uses the GGUF's rows as they are must rotate adjacent pairs
(2i, 2i+1) with theta_i = base^(-2i/head_dim). This script proves it: a numpy
forward of layer 0's attention from the raw, dequantized GGUF tensors, with
each layout, against the output of transformers' layer-0 self_attn (hook).

usage: rope_layout_check.py --model SmolLM2-135M-Instruct.Q4_1.gguf
"""

import argparse

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize

import hf_model

IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308]  # start of the chat template


def tensor(reader, name):
    t = next(t for t in reader.tensors if t.name == name)
    # dequantize returns the row-major [out, in] matrix (GGUF ne is [in, out]).
    return dequantize(t.data, t.tensor_type).astype(np.float64)


def field(reader, key):
    return reader.fields[key].parts[-1][0].item()


def rope(x, pos, base, layout):
    """x: [T, heads, d]. interleaved: pairs (2i, 2i+1); half: pairs (i, i+d/2)."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2) / d)           # [d/2]
    ang = pos[:, None] * inv[None, :]                  # [T, d/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if layout == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, a * s + b * c
        return out
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def attention_layer0(r, ids, layout, qk=None):
    n_head = field(r, "llama.attention.head_count")
    n_kv = field(r, "llama.attention.head_count_kv")
    base = field(r, "llama.rope.freq_base")
    eps = field(r, "llama.attention.layer_norm_rms_epsilon")
    x = tensor(r, "token_embd.weight")[ids]                        # [T, 576]
    h = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * tensor(r, "blk.0.attn_norm.weight")
    T, D = h.shape
    hd = D // n_head
    wq, wk = qk if qk is not None else (tensor(r, "blk.0.attn_q.weight"), tensor(r, "blk.0.attn_k.weight"))
    q = (h @ wq.T).reshape(T, n_head, hd)
    k = (h @ wk.T).reshape(T, n_kv, hd)
    v = (h @ tensor(r, "blk.0.attn_v.weight").T).reshape(T, n_kv, hd)
    pos = np.arange(T, dtype=np.float64)
    q, k = rope(q, pos, base, layout), rope(k, pos, base, layout)
    rep = n_head // n_kv                                            # GQA: query head j uses kv head j // rep
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("thd,uhd->htu", q, k) / np.sqrt(hd)
    s = np.where(np.tril(np.ones((T, T), bool))[None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = np.einsum("htu,uhd->thd", p, v).reshape(T, D)
    return o @ tensor(r, "blk.0.attn_output.weight").T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)

    model = hf_model.load_model(args.model)
    got = {}
    model.model.layers[0].self_attn.register_forward_hook(lambda m, i, o: got.__setitem__("o", o[0]))
    hf_model.logits(model, IDS)
    ref = got["o"][0].double().numpy()

    r = GGUFReader(args.model)
    scale = np.abs(ref).max()
    errs = {}
    for layout in ("interleaved", "half"):
        errs[layout] = float(np.abs(attention_layer0(r, IDS, layout) - ref).max())
        print(f"{layout:12s} max|numpy - transformers| = {errs[layout]:.3e}  (output max |x| {scale:.3f})")
    # Control: transformers' own (un-permuted) q/k weights need rotate-half.
    attn = model.model.layers[0].self_attn
    qk = (attn.q_proj.weight.detach().double().numpy(), attn.k_proj.weight.detach().double().numpy())
    for layout in ("interleaved", "half"):
        e = float(np.abs(attention_layer0(r, IDS, layout, qk) - ref).max())
        print(f"control, transformers' q/k weights, {layout:12s}: {e:.3e}")
    # Position 0 has no rotation, so the layouts can only differ from position 1 on.
    best = min(errs, key=errs.get)
    ok = errs[best] < 1e-3 * scale and errs[best] * 100 < max(errs.values())
    print(f"RoPE layout of the raw GGUF weights: {best}" + ("" if ok else "  (NOT conclusive)"))
    return 0 if ok and best == "interleaved" else 1


if __name__ == "__main__":
    raise SystemExit(main())
