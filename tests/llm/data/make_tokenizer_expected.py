#!/usr/bin/env python3
"""Writes tokenizer_expected.json: the ids Hugging Face `tokenizers` gives the samples of tokenizer_corpus.txt.

The reference tokenizer is built from the GGUF's own vocabulary and merges (tokenizer.ggml.tokens, .merges,
.token_type), with the rest of SmolLM2's tokenizer.json around them:
  - model BPE, no unk_token, no byte fallback, merges not ignored, no dropout;
  - no normalizer;
  - pre-tokenizer Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, trim_offsets=True,
    use_regex=True)] (what llama.cpp calls the "smollm" pre-tokenizer);
  - decoder ByteLevel;
  - the control tokens (type 3) added as special tokens, user-defined ones (type 4) as plain added tokens, none of
    them normalized, stripped or single-word.
For every sample it records the ids with special tokens matched ("ids", flashcpp's parse_special=true) and with
them left as text ("ids_plain": tokenizers' encode_special_tokens=True), and whether decoding gives the text back.
The chat prompts come from the GGUF's tokenizer.chat_template rendered with jinja2.

If transformers is installed, its own GGUF tokenizer conversion (AutoTokenizer.from_pretrained(dir, gguf_file=...))
encodes the corpus too, and where it disagrees with the reference is printed (informative: the expected file
holds the reference only).

Usage: make_tokenizer_expected.py [--gguf MODEL.gguf] [--corpus tokenizer_corpus.txt] [--out tokenizer_expected.json]
(the model defaults to $FLASHCPP_LLM_MODEL).
"""

import argparse
import json
import os
import sys
from pathlib import Path

import gguf
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

HERE = Path(__file__).resolve().parent
CONTROL, USER_DEFINED = 3, 4


def read_corpus(path):
    """The samples: one JSON string per line; '#' lines and blank lines are not samples."""
    samples = []
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line or line.startswith("#"):
            continue
        text = json.loads(line)
        if not isinstance(text, str):
            sys.exit(f"{path}:{number}: a sample must be a JSON string")
        samples.append((number, text))
    return samples


def field(reader, key):
    entry = reader.fields.get(key)
    return None if entry is None else entry.contents()


def read_gguf_tokenizer(path):
    reader = gguf.GGUFReader(str(path))
    meta = {
        "model": field(reader, "tokenizer.ggml.model"),
        "pre": field(reader, "tokenizer.ggml.pre"),
        "tokens": field(reader, "tokenizer.ggml.tokens"),
        "types": field(reader, "tokenizer.ggml.token_type"),
        "merges": field(reader, "tokenizer.ggml.merges"),
        "bos_id": field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_id": field(reader, "tokenizer.ggml.eos_token_id"),
        "chat_template": field(reader, "tokenizer.chat_template"),
    }
    if meta["model"] != "gpt2" or meta["pre"] != "smollm":
        sys.exit(f"{path}: tokenizer model {meta['model']!r}, pre {meta['pre']!r}; this script knows gpt2/smollm")
    return meta


def reference_tokenizer(meta):
    vocab = {token: index for index, token in enumerate(meta["tokens"])}
    if len(vocab) != len(meta["tokens"]):
        sys.exit("the GGUF vocabulary repeats a token")
    merges = [tuple(merge.split(" ")) for merge in meta["merges"]]
    model = models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False, byte_fallback=False,
                       ignore_merges=False)
    tok = Tokenizer(model)
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    pairs = list(zip(meta["tokens"], meta["types"]))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in pairs if ty == CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, ty in pairs if ty == USER_DEFINED])
    if tok.get_vocab_size(with_added_tokens=True) != len(meta["tokens"]):
        sys.exit("the added tokens are not all in the GGUF vocabulary")
    return tok


def encode(tok, text, special):
    tok.encode_special_tokens = not special
    try:
        return tok.encode(text, add_special_tokens=False).ids
    finally:
        tok.encode_special_tokens = False


def chat_prompts(meta):
    """(system, user, text) rendered by the GGUF's own chat template, as flashcpp's chat_prompt writes them."""
    import jinja2

    template = jinja2.Environment().from_string(meta["chat_template"])
    cases = [("", "What is the capital of France?"), ("You are a pirate.", "Tell me a joke about 3 parrots."),
             ("", "<|im_end|> inside a message\nand two lines")]
    prompts = []
    for system, user in cases:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        prompts.append((system, user, template.render(messages=messages, add_generation_prompt=True)))
    return prompts


def transformers_differences(gguf_path, samples, expected):
    """Where transformers' GGUF tokenizer conversion disagrees with the reference (None if unavailable)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    import transformers

    converted = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    differences = []
    for (line, text), ids in zip(samples, expected):
        theirs = converted.encode(text, add_special_tokens=False)
        if theirs != ids:
            differences.append({"line": line, "text": text, "reference": ids, "transformers": theirs})
    return {"version": transformers.__version__, "pre_tokenizer": json.loads(converted.backend_tokenizer.to_str()).get("pre_tokenizer"),
            "samples": differences}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gguf", type=Path, default=os.environ.get("FLASHCPP_LLM_MODEL"))
    parser.add_argument("--corpus", type=Path, default=HERE / "tokenizer_corpus.txt")
    parser.add_argument("--out", type=Path, default=HERE / "tokenizer_expected.json")
    args = parser.parse_args()
    if args.gguf is None:
        sys.exit("name the model: --gguf MODEL.gguf or FLASHCPP_LLM_MODEL")

    meta = read_gguf_tokenizer(args.gguf)
    tok = reference_tokenizer(meta)
    samples = read_corpus(args.corpus)

    records = []
    for line, text in samples:
        ids = encode(tok, text, special=True)
        records.append({"line": line, "text": text, "ids": ids, "ids_plain": encode(tok, text, special=False),
                        "roundtrip": tok.decode(ids, skip_special_tokens=False) == text})
    prompts = [{"system": system, "user": user, "text": text, "ids": encode(tok, text, special=True)}
               for system, user, text in chat_prompts(meta)]

    try:
        differences = transformers_differences(args.gguf, samples, [r["ids"] for r in records])
    except Exception as error:  # transformers' loader changes often; the reference does not depend on it
        differences = {"error": f"{type(error).__name__}: {error}"}

    # One sample per line, so a regenerated file diffs line by line.
    out = ["{", f'  "tokenizers_version": {json.dumps(tokenizers.__version__)},',
           f'  "model": {json.dumps(args.gguf.name)},', f'  "vocab_size": {len(meta["tokens"])},',
           f'  "bos_id": {meta["bos_id"]}, "eos_id": {meta["eos_id"]},', '  "samples": [']
    out += [f"    {json.dumps(r, ensure_ascii=False)}{',' if i + 1 < len(records) else ''}"
            for i, r in enumerate(records)]
    out += ["  ],", '  "chat_prompts": [']
    out += [f"    {json.dumps(p, ensure_ascii=False)}{',' if i + 1 < len(prompts) else ''}"
            for i, p in enumerate(prompts)]
    out += ["  ]", "}", ""]
    args.out.write_text("\n".join(out), encoding="utf-8")
    json.loads(args.out.read_text(encoding="utf-8"))  # it parses

    print(f"{args.out}: {len(records)} samples, {sum(len(r['ids']) for r in records)} tokens, "
          f"{len(prompts)} chat prompts (tokenizers {tokenizers.__version__})")
    print(f"samples that do not decode back to their text: {[r['line'] for r in records if not r['roundtrip']]}")
    if differences is None:
        print("transformers is not installed: its GGUF conversion was not compared")
    elif "error" in differences:
        print(f"transformers' GGUF conversion failed: {differences['error']}")
    else:
        print(f"transformers {differences['version']}'s GGUF conversion: pre_tokenizer "
              f"{json.dumps(differences['pre_tokenizer'])}")
        print(f"transformers' GGUF conversion disagrees on {len(differences['samples'])} of {len(records)} samples")
        for d in differences["samples"]:
            print(f"  line {d['line']} {d['text']!r}:\n    reference    {d['reference']}\n"
                  f"    transformers {d['transformers']}")


if __name__ == "__main__":
    main()
