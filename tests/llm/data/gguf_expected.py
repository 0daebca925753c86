#!/usr/bin/env python3
"""Expected values for tests/llm/test_gguf.cpp's RealModel test, computed independently of flashcpp with the
Python `gguf` package (gguf.GGUFReader, gguf.quants.dequantize).

    python3 tests/llm/data/gguf_expected.py path/to/SmolLM2-135M-Instruct.Q4_1.gguf

Prints, for each tensor checked, its type, ne, the first 16 dequantized values (float32, 9 significant digits:
they read back to the same float) and the sum and sum of squares of all its values, correctly rounded to
float64 (math.fsum).
"""
import math
import sys

import numpy as np
import gguf

TENSORS = ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_norm.weight"]


def main() -> None:
    reader = gguf.GGUFReader(sys.argv[1])
    by_name = {t.name: t for t in reader.tensors}
    for name in TENSORS:
        t = by_name[name]
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        wide = values.astype(np.float64)
        print(f"{name}: type {t.tensor_type.name} ne {list(map(int, t.shape))} elements {values.size}")
        print("  first16 {" + ", ".join(f"{v:.9g}f" for v in values[:16]) + "}")
        print(f"  sum {math.fsum(wide):.17g} sum_sq {math.fsum(wide * wide):.17g}")


if __name__ == "__main__":
    main()
