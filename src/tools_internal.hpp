// The one internal header the command-line tool (tools/flashcpp) includes: what it reaches below the public
// API for diagnostics and benchmarks, named here so that every other header under src/ stays private to the
// library. Nothing in tools/ includes another header under src/.
#pragma once
#include "core/env.hpp"                     // env::problems(): `flashcpp doctor` checks every FLASHCPP_* setting
#include "core/json.hpp"                    // load_json_file: `flashcpp prepare` reads a model's config.json
#include "ffi/ffi.hpp"                      // ffi::Library::load (doctor), ffi::allocator_stats (bench-mla-gdn-moe)
#include "mla/sparse_attention_kernel.hpp"  // mla-bench --fp8-kernel / --simple: the kernel selector's switches
