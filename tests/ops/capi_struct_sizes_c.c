/* Size-prefixed C structs as a C caller sees them (compiled as C): a struct_size of the struct's first published
 * size is accepted, one above the library's sizeof or below the first size refused, naming the size and the range.
 * The structs here are unchanged since they first began with their size, so each first published size is its
 * sizeof (the fused MoE config, which grew, is read at its 3.3 layout in test_capi_struct_sizes.cpp). The bundles
 * of tensors (C ABI 4.0.0) are tested through the entry points that read them before needing a plan or a GPU; the
 * plan runs' (flashcpp_batch_mla_cache, flashcpp_ragged_kv) are in the hostile-input test, which has plans.
 * Each function returns 0 on success, or the failing line with a message in `msg`. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "flashcpp/flashcpp.h"
#include "support/c_check.h"

/* First published sizes, as a caller compiled against the header of the struct's first release sees them. */
#define DECODE_CONFIG_FIRST_SIZE ((uint32_t)sizeof(flashcpp_mla_decode_config))             /* C ABI 3.0.0 */
#define DENSE_DECODE_CONFIG_FIRST_SIZE ((uint32_t)sizeof(flashcpp_mla_dense_decode_config)) /* C ABI 3.2.0 */

/* A sparse decode config for 132 SMs on device 0 (the test pretends one visible device: the size query needs none). */
static flashcpp_mla_decode_config decode_config(void) {
  flashcpp_mla_decode_config c = FLASHCPP_MLA_DECODE_CONFIG_INIT;
  c.batch = 4;
  c.s_q = 1;
  c.h_q = 64;
  c.d_qk = 576;
  c.topk = 128;
  c.num_sms = 132;
  c.device_id = 0;
  return c;
}

static flashcpp_mla_dense_decode_config dense_config(void) {
  flashcpp_mla_dense_decode_config c = FLASHCPP_MLA_DENSE_DECODE_CONFIG_INIT;
  c.batch = 4;
  c.s_q = 1;
  c.h_q = 64;
  c.block_size = 64;
  c.max_blocks = 16;
  c.num_sms = 132;
  c.device_id = 0;
  return c;
}

/* Fake tensors on device 0 (never read: every call here stops at a check): one i32 element on the device, and
 * in host memory for the plan's host arrays. */
static flashcpp_tensor device_one, host_one;
static flashcpp_tensor fake_one(int32_t device_type, uintptr_t address) {
  flashcpp_tensor t;
  memset(&t, 0, sizeof t);
  t.data = (void*)address;
  t.dtype = FLASHCPP_I32;
  t.device_type = device_type;
  t.device_id = 0;
  t.rank = 1;
  t.shape[0] = 1;
  t.strides[0] = 1;
  return t;
}

/* One entry point per bundle, called with the bundle's struct_size set to `size` (its members from *_INIT, the
 * rest of the call valid up to the bundle). */
static flashcpp_status sparse_prefill_at(uint32_t size) {
  flashcpp_mla_prefill_tensors t = FLASHCPP_MLA_PREFILL_TENSORS_INIT;
  flashcpp_mla_options o = FLASHCPP_MLA_OPTIONS_INIT;
  t.struct_size = size;
  return flashcpp_mla_sparse_prefill(&t, &o, NULL);
}
static flashcpp_status sparse_decode_at(uint32_t size) {
  flashcpp_mla_decode_config c = decode_config();
  flashcpp_mla_decode_tensors t = FLASHCPP_MLA_DECODE_TENSORS_INIT;
  flashcpp_mla_options o = FLASHCPP_MLA_OPTIONS_INIT;
  t.struct_size = size;
  return flashcpp_mla_sparse_decode(&c, &t, &o, NULL);
}
static flashcpp_status dense_plan_at(uint32_t size) {
  flashcpp_mla_dense_decode_config c = dense_config();
  flashcpp_mla_dense_decode_workspace w = FLASHCPP_MLA_DENSE_DECODE_WORKSPACE_INIT;
  w.struct_size = size;
  return flashcpp_mla_dense_decode_plan(&c, &device_one, &device_one, &w, NULL);
}
static flashcpp_status dense_decode_at(uint32_t size) {
  flashcpp_mla_dense_decode_config c = dense_config();
  flashcpp_mla_dense_decode_tensors t = FLASHCPP_MLA_DENSE_DECODE_TENSORS_INIT;
  flashcpp_mla_dense_decode_workspace w = FLASHCPP_MLA_DENSE_DECODE_WORKSPACE_INIT;
  flashcpp_mla_dense_decode_options o = FLASHCPP_MLA_DENSE_DECODE_OPTIONS_INIT;
  w.sched_meta = w.num_splits = w.lse_accum = w.o_accum = w.indices = w.token_lengths = &device_one;
  t.struct_size = size;
  return flashcpp_mla_dense_decode(&c, &t, &w, &o, NULL);
}
static flashcpp_status append_at(uint32_t size) {
  flashcpp_paged_kv_cache c = FLASHCPP_PAGED_KV_CACHE_INIT;
  c.struct_size = size;
  return flashcpp_append_paged_kv_cache(&device_one, &device_one, &device_one, &device_one, &c, NULL);
}
static flashcpp_status append_mla_at(uint32_t size) {
  flashcpp_paged_mla_kv_cache c = FLASHCPP_PAGED_MLA_KV_CACHE_INIT;
  c.struct_size = size;
  return flashcpp_append_paged_mla_kv_cache(&device_one, &device_one, &device_one, &device_one, &c, NULL);
}
static flashcpp_status prefill_plan_at(uint32_t size) {
  flashcpp_batch_prefill_config c = FLASHCPP_BATCH_PREFILL_CONFIG_INIT;
  flashcpp_workspace w = FLASHCPP_WORKSPACE_INIT;
  flashcpp_batch_prefill_plan* plan = NULL;
  w.struct_size = size;
  return flashcpp_batch_prefill_plan_create(&c, &w, &host_one, &host_one, &host_one, NULL, NULL, &plan);
}
static flashcpp_status sampling_at(uint32_t size) {
  flashcpp_sampling_workspace w = FLASHCPP_SAMPLING_WORKSPACE_INIT;
  flashcpp_sampling_options o = FLASHCPP_SAMPLING_OPTIONS_INIT;
  w.struct_size = size;
  return flashcpp_top_k_top_p_sampling_from_logits(&w, &device_one, &device_one, &device_one, NULL, 10, NULL, 0.9,
                                                   FLASHCPP_TOP_K_FIRST, NULL, &o, NULL);
}

typedef struct bundle_case {
  flashcpp_status (*call)(uint32_t size);
  uint32_t size;       /* sizeof, the first published size */
  const char* name;    /* the argument */
  const char* init;    /* its initializer, named by the refusal */
  const char* at_size; /* what the call stops at once the bundle is read: its first NULL tensor */
} bundle_case;

static int bundles_c(char* msg, size_t msg_len) {
  static const bundle_case cases[] = {
      {sparse_prefill_at, sizeof(flashcpp_mla_prefill_tensors), "tensors", "FLASHCPP_MLA_PREFILL_TENSORS_INIT",
       "'tensors.q' must not be NULL"},
      {sparse_decode_at, sizeof(flashcpp_mla_decode_tensors), "tensors", "FLASHCPP_MLA_DECODE_TENSORS_INIT",
       "'tensors.q' must not be NULL"},
      {dense_plan_at, sizeof(flashcpp_mla_dense_decode_workspace), "workspace",
       "FLASHCPP_MLA_DENSE_DECODE_WORKSPACE_INIT", "'workspace.sched_meta' must not be NULL"},
      {dense_decode_at, sizeof(flashcpp_mla_dense_decode_tensors), "tensors", "FLASHCPP_MLA_DENSE_DECODE_TENSORS_INIT",
       "'tensors.q' must not be NULL"},
      {append_at, sizeof(flashcpp_paged_kv_cache), "cache", "FLASHCPP_PAGED_KV_CACHE_INIT",
       "'k_cache' must not be NULL"},
      {append_mla_at, sizeof(flashcpp_paged_mla_kv_cache), "cache", "FLASHCPP_PAGED_MLA_KV_CACHE_INIT",
       "'cache.ckv_cache' must not be NULL"},
      {prefill_plan_at, sizeof(flashcpp_workspace), "workspace", "FLASHCPP_WORKSPACE_INIT",
       "'workspace.float_buffer' must not be NULL"},
      {sampling_at, sizeof(flashcpp_sampling_workspace), "workspace", "FLASHCPP_SAMPLING_WORKSPACE_INIT",
       "'workspace.softmax_buffer' must not be NULL"}};
  char text[256];
  size_t i, k;
  device_one = fake_one(FLASHCPP_CUDA, 1u << 20);
  host_one = fake_one(FLASHCPP_CPU, 2u << 20);
  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    const bundle_case* c = &cases[i];
    const uint32_t refused[3] = {0u, c->size - 1u, c->size + 8u};
    CHECK_ERROR(c->call(c->size), FLASHCPP_INVALID_ARGUMENT, c->at_size);
    for (k = 0; k < 3; ++k) {
      snprintf(text, sizeof text, "argument '%s' has struct_size %u; ", c->name, (unsigned)refused[k]);
      CHECK_ERROR(c->call(refused[k]), FLASHCPP_INVALID_ARGUMENT, text);
      snprintf(text, sizeof text, "struct_size must be in [%u, %u]", (unsigned)c->size, (unsigned)c->size);
      CHECK_ERROR(c->call(refused[k]), FLASHCPP_INVALID_ARGUMENT, text);
      CHECK_ERROR(c->call(refused[k]), FLASHCPP_INVALID_ARGUMENT, c->init);
    }
  }
  return 0;
}

int capi_struct_sizes_c(char* msg, size_t msg_len) {
  char text[256];
  flashcpp_mla_decode_config cfg = decode_config();
  flashcpp_mla_decode_plan_sizes sizes;
  flashcpp_mla_dense_decode_config dense = dense_config();
  flashcpp_mla_dense_decode_sizes dense_sizes;

  /* The first published size: accepted, and the size query answers. */
  cfg.struct_size = DECODE_CONFIG_FIRST_SIZE;
  memset(&sizes, 0, sizeof sizes);
  CHECK(flashcpp_mla_decode_plan(&cfg, NULL, NULL, &sizes, NULL) == FLASHCPP_SUCCESS, "decode_plan at the first size: %s",
        flashcpp_last_error());
  CHECK(sizes.num_sm_parts > 0, "decode_plan's size query filled nothing");

  /* A newer header's larger struct: refused, naming the size received, the range and this library's ABI. */
  cfg.struct_size = (uint32_t)sizeof cfg + 8;
  snprintf(text, sizeof text, "argument 'config' has struct_size %u; this library (C ABI %u.%u.%u) knows sizes up to %u",
           (unsigned)(sizeof cfg + 8), FLASHCPP_C_ABI_VERSION_MAJOR, FLASHCPP_C_ABI_VERSION_MINOR,
           FLASHCPP_C_ABI_VERSION_PATCH, (unsigned)sizeof cfg);
  CHECK_ERROR(flashcpp_mla_decode_plan(&cfg, NULL, NULL, &sizes, NULL), FLASHCPP_INVALID_ARGUMENT, text);
  snprintf(text, sizeof text, "struct_size must be in [%u, %u]", (unsigned)DECODE_CONFIG_FIRST_SIZE,
           (unsigned)sizeof cfg);
  CHECK_ERROR(flashcpp_mla_decode_plan(&cfg, NULL, NULL, &sizes, NULL), FLASHCPP_INVALID_ARGUMENT, text);
  CHECK_ERROR(flashcpp_mla_decode_plan(&cfg, NULL, NULL, &sizes, NULL), FLASHCPP_INVALID_ARGUMENT,
              "(start from FLASHCPP_MLA_DECODE_CONFIG_INIT)");

  /* Below the first published size (a struct never released this small): refused. */
  cfg.struct_size = DECODE_CONFIG_FIRST_SIZE - 4;
  snprintf(text, sizeof text,
           "argument 'config' has struct_size %u; it is smaller than the struct's first published size: "
           "struct_size must be in [%u, %u]",
           (unsigned)(DECODE_CONFIG_FIRST_SIZE - 4), (unsigned)DECODE_CONFIG_FIRST_SIZE, (unsigned)sizeof cfg);
  CHECK_ERROR(flashcpp_mla_decode_plan(&cfg, NULL, NULL, &sizes, NULL), FLASHCPP_INVALID_ARGUMENT, text);
  cfg.struct_size = 0;
  CHECK_ERROR(flashcpp_mla_decode_plan(&cfg, NULL, NULL, &sizes, NULL), FLASHCPP_INVALID_ARGUMENT,
              "argument 'config' has struct_size 0; it is smaller");

  /* The dense config (added in 3.2.0): the same rule through the same helper. */
  dense.struct_size = DENSE_DECODE_CONFIG_FIRST_SIZE;
  CHECK(flashcpp_mla_dense_decode_sizes_for(&dense, &dense_sizes) == FLASHCPP_SUCCESS, "dense sizes_for: %s",
        flashcpp_last_error());
  CHECK(dense_sizes.num_sm_parts > 0, "dense sizes_for filled nothing");
  dense.struct_size = UINT32_MAX;
  snprintf(text, sizeof text, "argument 'config' has struct_size %u; this library", (unsigned)UINT32_MAX);
  CHECK_ERROR(flashcpp_mla_dense_decode_sizes_for(&dense, &dense_sizes), FLASHCPP_INVALID_ARGUMENT, text);
  dense.struct_size = DENSE_DECODE_CONFIG_FIRST_SIZE - 1;
  CHECK_ERROR(flashcpp_mla_dense_decode_sizes_for(&dense, &dense_sizes), FLASHCPP_INVALID_ARGUMENT,
              "smaller than the struct's first published size");

  /* Nothing past struct_size is read: the caller's struct ends where an unreadable page begins. */
  {
    const long page = sysconf(_SC_PAGESIZE);
    char* two = (char*)mmap(NULL, (size_t)(2 * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    flashcpp_mla_decode_config* at_end;
    CHECK(two != MAP_FAILED, "mmap");
    CHECK(mprotect(two + page, (size_t)page, PROT_NONE) == 0, "mprotect");
    at_end = (flashcpp_mla_decode_config*)(two + page - DECODE_CONFIG_FIRST_SIZE);
    cfg = decode_config();
    cfg.struct_size = DECODE_CONFIG_FIRST_SIZE;
    memcpy(at_end, &cfg, DECODE_CONFIG_FIRST_SIZE);
    CHECK(flashcpp_mla_decode_plan(at_end, NULL, NULL, &sizes, NULL) == FLASHCPP_SUCCESS,
          "decode_plan on a struct at a page's end: %s", flashcpp_last_error());
    munmap(two, (size_t)(2 * page));
  }
  return bundles_c(msg, msg_len);
}
