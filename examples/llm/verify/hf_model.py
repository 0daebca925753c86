"""Load SmolLM2 from its GGUF with Hugging Face transformers, the independent
implementation flashcpp-llm is verified against, plus the few forward helpers
the scripts share (teacher-forced logits, greedy decoding, top-k summaries).

Everything is offline: the GGUF's directory needs no config.json, tokenizer
files or network; transformers builds the config and tokenizer from the GGUF's
metadata.
"""

import os

# Set before transformers is imported: it reads these at import time. Offline
# because the GPU machine has no network, and a local GGUF needs none.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402


def versions():
    from importlib.metadata import PackageNotFoundError, version

    def v(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "gguf": v("gguf"),
        "tokenizers": v("tokenizers"),
        "numpy": v("numpy"),
        "accelerate": v("accelerate"),
    }


def load_tokenizer(model_path):
    d, name = os.path.split(os.path.abspath(model_path))
    return AutoTokenizer.from_pretrained(d, gguf_file=name)


def load_model(model_path, device="cpu", dtype=torch.float32):
    """transformers' own GGUF path: dequantize (gguf.quants), un-permute
    attn_q/attn_k (LlamaTensorProcessor), build LlamaForCausalLM.

    from_pretrained(gguf_file=) insists on the accelerate package although it
    does not use it for a plain single-device load; where accelerate is
    missing we call the same transformers loader (load_gguf_checkpoint) by
    hand, so the weights are identical either way.
    """
    d, name = os.path.split(os.path.abspath(model_path))
    try:
        import accelerate  # noqa: F401

        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=dtype)
        how = "from_pretrained"
    except ImportError:
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

        config = AutoConfig.from_pretrained(d, gguf_file=name)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        tensors = load_gguf_checkpoint(model_path, return_tensors=True, model_to_load=model)["tensors"]
        missing, unexpected = model.load_state_dict(tensors, strict=False)
        model.tie_weights()
        # lm_head is tied to the embedding (the GGUF has no output.weight).
        assert set(missing) <= {"lm_head.weight"} and not unexpected, (missing, unexpected)
        how = "load_gguf_checkpoint"
    assert model.config.tie_word_embeddings
    model.to(device=device, dtype=dtype).eval()
    model.load_path = how
    return model


@torch.no_grad()
def logits(model, ids, last_only=False):
    """Teacher-forced logits of every position (or only the last), float32
    [T, vocab] on the CPU."""
    dev = next(model.parameters()).device
    x = torch.tensor([ids], dtype=torch.long, device=dev)
    out = model(input_ids=x, use_cache=False, logits_to_keep=1 if last_only else 0)
    return out.logits[0].float().cpu()


@torch.no_grad()
def greedy(model, ids, n):
    """n greedy tokens after ids. Re-runs the full prefix each step (no KV
    cache) so every step is the same computation as a teacher-forced forward;
    does not stop at eos (callers record eos if it shows up)."""
    out = list(ids)
    for _ in range(n):
        out.append(int(logits(model, out, last_only=True)[-1].argmax()))
    return out[len(ids):]


def topk(row, k):
    v, i = torch.topk(row.double(), k)
    return [[int(a), float(b)] for a, b in zip(i.tolist(), v.tolist())]
