"""Token-for-token verification of flashcpp-llm against transformers, on the
GPU machine.

  verify.py --model SmolLM2-135M-Instruct.Q4_1.gguf --engine PATH/flashcpp-llm --out-dir DIR

(a) transformers (CUDA, float32, TF32 off) scores the 4 reference sequences of
    tests/llm/data/smollm2_reference.json (teacher-forced, 128 tokens each) and
    decodes 32 greedy tokens after each prompt;
(b) the engine does the same:
      flashcpp-llm score --model M --ids IDS.json --logits OUT.f32
      flashcpp-llm generate --model M --ids PROMPTS.json --max-tokens 32 --greedy --out GEN.json
    (IDS/PROMPTS.json: {"sequences": [[ids...], ...]}; OUT.f32: little-endian
    float32 [sum of lengths][vocab]; GEN.json: {"sequences": [[ids...], ...]});
(c) compares: top-1 agreement over all positions (>= 0.99), per-position
    cosine of the logit vectors (min >= 0.999), greedy sequences per prompt,
    and, where they part, whether that step is a near tie in the reference
    (its logit for our token within 0.05 of its top-1);
(d) prints one line `LLM_VERIFY {json}`, writes DIR/llm_verify.json, and exits
    0 on pass, 1 on fail.

Pass = both thresholds hold and every greedy sequence is identical or parts
only at a near tie. Needs no network (the GGUF is loaded offline).
"""

import argparse
import copy
import hashlib
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import torch

import hf_model

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

MIN_TOP1 = 0.99
MIN_COSINE = 0.999
NEAR_TIE = 0.05
GREEDY = 32


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def run_engine(cmd, log_path):
    t = time.time()
    with open(log_path, "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"engine exited {rc}: {' '.join(cmd)} (log: {log_path})")
    return time.time() - t


def engine_outputs(args, seqs, prompts, vocab):
    d = args.out_dir
    ids_path, prompts_path = os.path.join(d, "ids.json"), os.path.join(d, "prompts_ids.json")
    logits_path, gen_path = os.path.join(d, "logits.f32"), os.path.join(d, "gen.json")
    json.dump({"sequences": seqs}, open(ids_path, "w"))
    json.dump({"sequences": prompts}, open(prompts_path, "w"))
    timing = {}
    timing["score_s"] = run_engine([args.engine, "score", "--model", args.model, "--dtype", args.dtype,
                                    "--ids", ids_path, "--logits", logits_path], os.path.join(d, "engine_score.log"))
    timing["generate_s"] = run_engine([args.engine, "generate", "--model", args.model, "--dtype", args.dtype,
                                       "--ids", prompts_path, "--max-tokens", str(GREEDY), "--greedy", "--out", gen_path],
                                      os.path.join(d, "engine_generate.log"))
    n = sum(len(s) for s in seqs)
    flat = np.fromfile(logits_path, dtype="<f4")
    if flat.size != n * vocab:
        raise RuntimeError(f"{logits_path}: {flat.size} floats, expected {n} x {vocab}")
    flat = flat.reshape(n, vocab)
    ours, o = [], 0
    for s in seqs:
        ours.append(torch.from_numpy(flat[o:o + len(s)].copy()))
        o += len(s)
    gen = json.load(open(gen_path))["sequences"]
    if len(gen) != len(prompts):
        raise RuntimeError(f"{gen_path}: {len(gen)} sequences, expected {len(prompts)}")
    return ours, [[int(t) for t in g] for g in gen], timing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--engine", required=True, help="the flashcpp-llm binary")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"], help="the engine's --dtype")
    ap.add_argument("--reference", default=os.path.join(REPO, "tests", "llm", "data", "smollm2_reference.json"))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    # A true float32 reference: no TF32 in the matmuls.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device = "cuda" if torch.cuda.is_available() else "cpu"

    ref_doc = json.load(open(args.reference))
    seqs = [p["ids"] for p in ref_doc["prompts"]]
    prompts = [p["ids"][:p["prompt_length"]] for p in ref_doc["prompts"]]
    names = [p["name"] for p in ref_doc["prompts"]]
    eos = ref_doc["eos_token_id"]

    # (a) transformers
    model = hf_model.load_model(args.model, device)
    vocab = model.config.vocab_size
    ref_logits = [hf_model.logits(model, s) for s in seqs]
    ref_greedy = [hf_model.greedy(model, p, GREEDY) for p in prompts]
    # Sanity of this machine's transformers against the committed reference
    # (made elsewhere, possibly on the CPU): informational only.
    stored = {
        "top1_agreement": float(np.mean([int(r[t].argmax()) == p["top2"][t][0][0]
                                         for r, p in zip(ref_logits, ref_doc["prompts"]) for t in range(len(r))])),
        "max_abs_top1_logit": max(abs(float(r[t, p["top2"][t][0][0]]) - p["top2"][t][0][1])
                                  for r, p in zip(ref_logits, ref_doc["prompts"]) for t in range(len(r))),
        "greedy_identical": sum(g == p["greedy_ids"] for g, p in zip(ref_greedy, ref_doc["prompts"])),
    }
    # Control: transformers itself in 16-bit floats against its float32 run, on the same positions (what rounding
    # the activations costs any implementation of that type).
    control = {}
    for name, dt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        m16 = copy.deepcopy(model).to(dt)
        low = [hf_model.logits(m16, s) for s in seqs]
        del m16
        cos = torch.cat([torch.nn.functional.cosine_similarity(r.double(), x.double(), dim=-1)
                         for r, x in zip(ref_logits, low)])
        agree = torch.cat([r.argmax(-1) == x.argmax(-1) for r, x in zip(ref_logits, low)])
        control["transformers_" + name] = {"min_cosine": float(cos.min()), "mean_cosine": float(cos.mean()),
                                           "top1_agreement": float(agree.double().mean())}

    versions = dict(hf_model.versions(), python=platform.python_version(),
                    device=torch.cuda.get_device_name() if device == "cuda" else "cpu")
    result = {"top1_agreement": None, "min_cosine": None, "mean_cosine": None, "greedy_identical": None,
              "greedy_total": len(prompts), "near_ties": [], "positions": sum(len(s) for s in seqs),
              "dtype": args.dtype, "control": control, "versions": versions, "pass": False}
    try:
        ours_logits, ours_greedy, timing = engine_outputs(args, seqs, prompts, vocab)
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        result["error"] = str(e)
        print("LLM_VERIFY " + json.dumps(result))
        json.dump(result, open(os.path.join(args.out_dir, "llm_verify.json"), "w"), indent=1)
        return 1
    versions["engine_sha256"] = sha256(args.engine)

    # (c) compare
    per_prompt, cos_all, agree_all, mismatches = [], [], [], []
    for i, (r, o) in enumerate(zip(ref_logits, ours_logits)):
        r64, o64 = r.double(), o.double()
        cos = torch.nn.functional.cosine_similarity(r64, o64, dim=-1)
        agree = r.argmax(-1) == o.argmax(-1)
        for t in torch.nonzero(~agree).flatten().tolist():
            top2 = torch.topk(r64[t], 2).values
            mismatches.append({"prompt": names[i], "position": t, "ours": int(o[t].argmax()),
                               "ref": int(r[t].argmax()), "ref_gap": float(top2[0] - top2[1])})
        cos_all.append(cos)
        agree_all.append(agree)
        per_prompt.append({"name": names[i], "top1_agreement": float(agree.double().mean()),
                           "min_cosine": float(cos.min()), "max_abs_diff": float((r64 - o64).abs().max()),
                           "finite": bool(torch.isfinite(o).all())})
    cos_all, agree_all = torch.cat(cos_all), torch.cat(agree_all)

    near_ties, parted = [], []
    identical = 0
    for i, (ref_g, our_g) in enumerate(zip(ref_greedy, ours_greedy)):
        n = len(our_g)
        # An engine that stops at eos may return fewer tokens: fine if the
        # reference emitted the same eos there.
        if our_g == ref_g[:n] and (n == GREEDY or (n > 0 and our_g[-1] == eos)):
            identical += 1
            continue
        k = next((j for j in range(min(n, GREEDY)) if our_g[j] != ref_g[j]), min(n, GREEDY))
        step = {"prompt": names[i], "step": k, "ours": our_g[k] if k < n else None, "ref": ref_g[k]}
        if k < n:
            # Reference logits at the parting step (same prefix for both).
            row = hf_model.logits(model, prompts[i] + ref_g[:k], last_only=True)[-1].double()
            step["gap"] = float(row[ref_g[k]] - row[our_g[k]])
            step["ours_rank"] = int((row > row[our_g[k]]).sum())
        if step.get("gap", float("inf")) < NEAR_TIE:
            near_ties.append(step)
        else:
            parted.append(step)

    top1 = float(agree_all.double().mean())
    min_cos = float(cos_all.min())
    ok = (top1 >= MIN_TOP1 and min_cos >= MIN_COSINE and not parted
          and all(p["finite"] for p in per_prompt))
    result.update({
        "top1_agreement": top1, "min_cosine": min_cos, "mean_cosine": float(cos_all.mean()),
        "greedy_identical": identical, "near_ties": near_ties, "pass": ok,
    })
    if parted:
        result["greedy_parted"] = parted
    print("LLM_VERIFY " + json.dumps(result))
    raw = dict(result, thresholds={"top1": MIN_TOP1, "cosine": MIN_COSINE, "near_tie": NEAR_TIE},
               per_prompt=per_prompt, top1_mismatches=mismatches, timing=timing,
               ref_vs_stored_reference=stored, ref_device=device, ref_load_path=model.load_path,
               ref_greedy=ref_greedy, ours_greedy=ours_greedy,
               cosine=[round(float(c), 7) for c in cos_all])
    with open(os.path.join(args.out_dir, "llm_verify.json"), "w") as f:
        json.dump(raw, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
