#!/usr/bin/env python3
"""Writes the seed corpus of the GGUF fuzz harness (tests/fuzz/corpus/gguf/): small valid GGUF files, each under
4 KiB, and one truncated file. Written with struct from the format's description, not with a GGUF library, so the
seeds do not share a writer's assumptions with the reader.

    python3 tests/llm/data/gguf_fuzz_seeds.py tests/fuzz/corpus/gguf
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
F32_T, F16_T, Q4_0_T, Q4_1_T, Q8_0_T, BF16_T = 0, 1, 2, 3, 8, 30
SCALAR_FORMAT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
                 U64: "<Q", I64: "<q", F64: "<d"}
BLOCK = {F32_T: (1, 4), F16_T: (1, 2), BF16_T: (1, 2), Q4_0_T: (32, 18), Q4_1_T: (32, 20), Q8_0_T: (32, 34)}


def gguf_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def value(kind: int, v) -> bytes:
    if kind == STRING:
        return gguf_string(v)
    if kind == ARRAY:
        element_kind, items = v
        return struct.pack("<IQ", element_kind, len(items)) + b"".join(value(element_kind, x) for x in items)
    return struct.pack(SCALAR_FORMAT[kind], v)


def gguf(kvs, tensors, version=3, alignment=32) -> bytes:
    """kvs: [(key, kind, value)]; tensors: [(name, ne, ggml type)] with deterministic data."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, kind, v in kvs:
        out += gguf_string(key) + struct.pack("<I", kind) + value(kind, v)
    blobs, offset = [], 0
    for name, ne, ggml_type in tensors:
        elements = 1
        for extent in ne:
            elements *= extent
        per_block, block_bytes = BLOCK[ggml_type]
        nbytes = elements // per_block * block_bytes
        offset = (offset + alignment - 1) // alignment * alignment
        out += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", e) for e in ne)
        out += struct.pack("<IQ", ggml_type, offset)
        blobs.append((offset, bytes((i * 37 + len(name)) % 256 for i in range(nbytes))))
        offset += nbytes
    if tensors:
        out += b"\0" * (-len(out) % alignment)
    data = bytearray(offset)
    for start, blob in blobs:
        data[start:start + len(blob)] = blob
    return out + bytes(data)


def main() -> None:
    target = sys.argv[1]
    os.makedirs(target, exist_ok=True)
    seeds = {
        "tensors_every_type": gguf(
            [("general.architecture", STRING, "llama"), ("general.alignment", U32, 32), ("llama.block_count", U32, 1)],
            [("f32", [4, 2], F32_T), ("f16", [8], F16_T), ("bf16", [8], BF16_T), ("q4_0", [32, 2], Q4_0_T),
             ("q4_1", [64], Q4_1_T), ("q8_0", [32, 1, 1, 2], Q8_0_T)]),
        "metadata_every_type_v2": gguf(
            [("u8", U8, 200), ("i8", I8, -3), ("u16", U16, 60000), ("i16", I16, -300), ("u32", U32, 4000000000),
             ("i32", I32, -7), ("f32", F32, 0.5), ("bool", BOOL, True), ("string", STRING, "x"),
             ("u64", U64, 2**63), ("i64", I64, -2**62), ("f64", F64, 1e-300), ("a.u8", ARRAY, (U8, [1, 2])),
             ("a.i64", ARRAY, (I64, [-1])), ("a.f32", ARRAY, (F32, [1.0, -2.0])), ("a.bool", ARRAY, (BOOL, [False])),
             ("a.empty", ARRAY, (STRING, []))],
            [], version=2),
        "tokenizer_like": gguf(
            [("general.architecture", STRING, "llama"), ("tokenizer.ggml.model", STRING, "gpt2"),
             ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "</s>", "a", "b", "ab", "\u0120c"])),
             ("tokenizer.ggml.token_type", ARRAY, (I32, [3, 3, 1, 1, 1, 1])),
             ("tokenizer.ggml.merges", ARRAY, (STRING, ["a b"])), ("tokenizer.ggml.bos_token_id", U32, 0),
             ("tokenizer.ggml.add_bos_token", BOOL, False), ("llama.rope.freq_base", F32, 100000.0)],
            [("token_embd.weight", [32, 6], Q8_0_T), ("output_norm.weight", [32], F32_T)]),
        "alignment_64": gguf(
            [("general.alignment", U32, 64)],
            [("a", [3], F32_T), ("b", [32, 2], Q4_1_T), ("c", [5], F16_T)], alignment=64),
    }
    seeds["truncated"] = seeds["tensors_every_type"][:150]
    for name, data in seeds.items():
        assert len(data) < 4096, name
        with open(os.path.join(target, name), "wb") as f:
            f.write(data)
        print(name, len(data))


if __name__ == "__main__":
    main()
