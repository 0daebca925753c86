#!/usr/bin/env bash
# The thirty-second session's suite call: FlashMLA's suites (OPS, default "prefill dense") beside main's library in
# one process on the same tensors (twentyseventh-suites.sh).
# Here, first:
#   kit s (ignored): main's stripped library, its dependencies, test_mla_gpu and the golden cases:
#     FLASHCPP_GOLDEN_DIR=<shared data>/flashmla-golden bash scripts/mla-variants.sh build build-gpu-full .mla-kit-a head
#     mkdir .mla-kit-s && cp -a .mla-kit-a/{head,lib,test_mla_gpu,golden} .mla-kit-s/ && tar czf .mla-kit-s.tgz .mla-kit-s
# Then one device call carrying .mla-kit-s.tgz and .flashmla-kit.tgz (FlashMLA main@9241ae3's package):
#   bash docs/gpu-runs/2026-12-07/thirtysecond-suites.sh
# As run, this call also built FlashMLA's package on the GPU machine from a source archive; that step is not kept:
# the tree builds no fetched code. Bring the package built there as .flashmla-kit.tgz (.flashmla-kit/flash_mla).
set -u
out=${OUT:-$(mktemp -d)}
OUT=$out OPS=${OPS:-prefill dense} bash docs/gpu-runs/2026-12-07/twentyseventh-suites.sh
