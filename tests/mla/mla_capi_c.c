/* The sparse-MLA C ABI exercised from C (this file is compiled as C, so the headers must be valid C).
 * Each function returns 0 on success, or the failing line with a message in `msg`. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "flashcpp/flashcpp.h"
#include "support/c_check.h"

static flashcpp_tensor make_tensor(void* data, int32_t dtype, int32_t device_type, int32_t device_id, int32_t rank,
                                   const int64_t* shape) {
  flashcpp_tensor t;
  int64_t stride = 1;
  int i;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.device_type = device_type;
  t.device_id = device_id;
  t.rank = rank;
  for (i = rank - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}

/* A decode config for 132 SMs on device 1000 (which does not exist: every call stops at the device lookup). */
static flashcpp_mla_decode_config decode_config(int32_t batch, int32_t s_q, int32_t h_q, int32_t d_qk, int32_t topk,
                                                int32_t extra_topk) {
  flashcpp_mla_decode_config c = FLASHCPP_MLA_DECODE_CONFIG_INIT;
  c.batch = batch;
  c.s_q = s_q;
  c.h_q = h_q;
  c.d_qk = d_qk;
  c.topk = topk;
  c.extra_topk = extra_topk;
  c.num_sms = 132;
  c.device_id = 1000;
  return c;
}

int mla_c_abi_status_codes(char* msg, size_t msg_len) {
  static const int64_t q_shape[3] = {4, 64, 576}, kv_shape[3] = {300, 1, 576}, idx_shape[3] = {4, 1, 128};
  static const int64_t out_shape[3] = {4, 64, 512}, lse_shape[2] = {4, 64};
  /* Fake device addresses 16 MiB apart: outputs may not overlap other arguments. */
  char* fake = (char*)(((size_t)1) << 40);
  flashcpp_tensor q = make_tensor(fake, FLASHCPP_BF16, FLASHCPP_CUDA, 1000, 3, q_shape);
  flashcpp_tensor kv = make_tensor(fake + (1 << 24), FLASHCPP_BF16, FLASHCPP_CUDA, 1000, 3, kv_shape);
  flashcpp_tensor idx = make_tensor(fake + (2 << 24), FLASHCPP_I32, FLASHCPP_CUDA, 1000, 3, idx_shape);
  flashcpp_tensor out = make_tensor(fake + (3 << 24), FLASHCPP_BF16, FLASHCPP_CUDA, 1000, 3, out_shape);
  flashcpp_tensor lse = make_tensor(fake + (4 << 24), FLASHCPP_F32, FLASHCPP_CUDA, 1000, 2, lse_shape);
  flashcpp_mla_options pp = FLASHCPP_MLA_OPTIONS_INIT;
  flashcpp_mla_prefill_tensors pt = FLASHCPP_MLA_PREFILL_TENSORS_INIT;
  flashcpp_mla_device_info info;
  flashcpp_mla_decode_config cfg;
  flashcpp_mla_decode_plan_sizes sizes;

  CHECK(strcmp(flashcpp_status_name(FLASHCPP_UNSUPPORTED), "unsupported") == 0, "status name");
  CHECK(strcmp(flashcpp_status_name(FLASHCPP_UNTRUSTED), "untrusted file") == 0, "status name");
  CHECK(strcmp(flashcpp_status_name((flashcpp_status)11), "unknown status") == 0, "status name");
  CHECK(flashcpp_abi_version() == FLASHCPP_C_ABI_VERSION && FLASHCPP_C_ABI_VERSION == 40300u, "ABI version");

  CHECK_ERROR(flashcpp_mla_get_device_info(0, NULL), FLASHCPP_INVALID_ARGUMENT, "argument 'info' must not be NULL");
  CHECK_ERROR(flashcpp_mla_get_device_info(1000, &info), FLASHCPP_INVALID_ARGUMENT, "device id 1000");

  pt.kv = &kv;
  pt.indices = &idx;
  pt.out = &out;
  pt.lse = &lse;
  pp.sm_scale = 0.05f;
  CHECK(pp.struct_size == sizeof pp && pp.d_v == 512, "FLASHCPP_MLA_OPTIONS_INIT");
  CHECK_ERROR(flashcpp_mla_sparse_prefill(NULL, &pp, NULL), FLASHCPP_INVALID_ARGUMENT,
              "flashcpp_mla_sparse_prefill: argument 'tensors' must not be NULL");
  CHECK_ERROR(flashcpp_mla_sparse_prefill(&pt, &pp, NULL), FLASHCPP_INVALID_ARGUMENT,
              "flashcpp_mla_sparse_prefill: argument 'tensors.q' must not be NULL");
  pt.q = &q;
  CHECK_ERROR(flashcpp_mla_sparse_prefill(&pt, NULL, NULL), FLASHCPP_INVALID_ARGUMENT,
              "argument 'options' must not be NULL");
  pp.struct_size = 8; /* a caller built against another header */
  CHECK_ERROR(flashcpp_mla_sparse_prefill(&pt, &pp, NULL), FLASHCPP_INVALID_ARGUMENT,
              "argument 'options' has struct_size 8");
  pp.struct_size = sizeof pp;
  pp.sm_scale = -1.f;
  CHECK_ERROR(flashcpp_mla_sparse_prefill(&pt, &pp, NULL), FLASHCPP_INVALID_ARGUMENT,
              "mla::sparse_prefill: argument 'sm_scale' must be finite and > 0");
  pp.sm_scale = NAN;
  CHECK_ERROR(flashcpp_mla_sparse_prefill(&pt, &pp, NULL), FLASHCPP_INVALID_ARGUMENT, "'sm_scale'");
  pp.sm_scale = 0.05f;
  idx.dtype = FLASHCPP_I64;
  CHECK_ERROR(flashcpp_mla_sparse_prefill(&pt, &pp, NULL), FLASHCPP_INVALID_ARGUMENT,
              "argument 'indices' must have dtype i32");
  idx.dtype = 99;
  CHECK_ERROR(flashcpp_mla_sparse_prefill(&pt, &pp, NULL), FLASHCPP_INVALID_ARGUMENT, "unknown dtype code");
  idx.dtype = FLASHCPP_I32;
  /* q == kv == out: one buffer for everything is refused by the overlap rule. */
  {
    flashcpp_tensor same_q = q, same_kv = kv;
    flashcpp_mla_prefill_tensors same = pt;
    same_q.data = same_kv.data = out.data;
    same.q = &same_q;
    same.kv = &same_kv;
    CHECK_ERROR(flashcpp_mla_sparse_prefill(&same, &pp, NULL), FLASHCPP_INVALID_ARGUMENT,
                "mla::sparse_prefill: argument 'out' must not overlap 'q'");
  }
  /* A fully valid call on a device that does not exist stops at the device lookup. */
  CHECK_ERROR(flashcpp_mla_sparse_prefill(&pt, &pp, NULL), FLASHCPP_INVALID_ARGUMENT, "device id 1000");

  /* Decode plan: size query without buffers, on a visible device only (the caller pretends one: device 0). */
  cfg = decode_config(2, 1, 128, 576, 2048, 0);
  memset(&sizes, 0x5A, sizeof sizes);
  CHECK_ERROR(flashcpp_mla_decode_plan(&cfg, NULL, NULL, &sizes, NULL), FLASHCPP_INVALID_ARGUMENT,
              "argument 'config.device_id' must be a visible CUDA device; device id 1000 is outside [0, 1)");
  CHECK(sizes.num_sm_parts == 0x5A5A5A5A, "sizes written on failure");
  cfg.device_id = 0;
  CHECK(flashcpp_mla_decode_plan(&cfg, NULL, NULL, &sizes, NULL) == FLASHCPP_SUCCESS, "size query: %s",
        flashcpp_last_error());
  cfg.device_id = 1000;
  CHECK(sizes.split == 1 && sizes.num_sm_parts == 66, "sizes: split %d parts %d", sizes.split, sizes.num_sm_parts);
  CHECK(sizes.sched_meta_elems == 66 * FLASHCPP_MLA_SCHED_META_INTS && sizes.num_splits_elems == 3, "sizes");
  CHECK(sizes.lse_accum_elems == 68 * 128 && sizes.o_accum_elems == 68 * 128 * 256,
        "accumulator sizes (o_accum: bf16 partial rows, two to an f32 element)");

  /* A bad config leaves `sizes` untouched. */
  memset(&sizes, 0x5A, sizeof sizes);
  cfg.topk = 100;
  CHECK_ERROR(flashcpp_mla_decode_plan(&cfg, NULL, NULL, &sizes, NULL), FLASHCPP_INVALID_ARGUMENT,
              "argument 'topk'");
  CHECK(sizes.num_sm_parts == 0x5A5A5A5A, "sizes written on failure");
  cfg.topk = 2048;
  {
    static const int64_t meta_shape[2] = {66, 8};
    flashcpp_tensor meta = make_tensor(fake + (5 << 24), FLASHCPP_I32, FLASHCPP_CUDA, 1000, 2, meta_shape);
    cfg.device_id = 0;
    CHECK_ERROR(flashcpp_mla_decode_plan(&cfg, &meta, NULL, &sizes, NULL), FLASHCPP_INVALID_ARGUMENT,
                "'sched_meta' and 'num_splits' must both be NULL");
    CHECK(sizes.num_sm_parts == 0x5A5A5A5A, "sizes written on failure");
    cfg.device_id = 1000;
  }
  CHECK_ERROR(flashcpp_mla_decode_plan(NULL, NULL, NULL, &sizes, NULL), FLASHCPP_INVALID_ARGUMENT,
              "argument 'config' must not be NULL");
  {
    /* Planned by lengths (ABI 3.5.0): the lengths are checked before anything touches the device. */
    static const int64_t meta_shape[2] = {66, 8}, splits_shape[1] = {3}, len_shape[1] = {2}, long_shape[1] = {3};
    flashcpp_tensor meta = make_tensor(fake + (5 << 24), FLASHCPP_I32, FLASHCPP_CUDA, 0, 2, meta_shape);
    flashcpp_tensor splits = make_tensor(fake + (6 << 24), FLASHCPP_I32, FLASHCPP_CUDA, 0, 1, splits_shape);
    flashcpp_tensor len = make_tensor(fake + (7 << 24), FLASHCPP_F32, FLASHCPP_CUDA, 0, 1, len_shape);
    cfg.device_id = 0;
    cfg.num_sms = 132;
    CHECK(flashcpp_mla_decode_plan_by_lengths(&cfg, NULL, NULL, NULL, NULL, &sizes, NULL) == FLASHCPP_SUCCESS,
          "size query by lengths: %s", flashcpp_last_error());
    CHECK(sizes.split == 1 && sizes.num_sm_parts == 66, "sizes by lengths: split %d parts %d", sizes.split,
          sizes.num_sm_parts);
    CHECK_ERROR(flashcpp_mla_decode_plan_by_lengths(&cfg, &meta, &splits, &len, NULL, &sizes, NULL),
                FLASHCPP_INVALID_ARGUMENT, "argument 'topk_length'");
    len.dtype = FLASHCPP_I32;
    len.shape[0] = long_shape[0];
    CHECK_ERROR(flashcpp_mla_decode_plan_by_lengths(&cfg, &meta, &splits, &len, NULL, &sizes, NULL),
                FLASHCPP_INVALID_ARGUMENT, "argument 'topk_length'");
    len.shape[0] = len_shape[0];
    CHECK_ERROR(flashcpp_mla_decode_plan_by_lengths(&cfg, &meta, &splits, NULL, &len, &sizes, NULL),
                FLASHCPP_INVALID_ARGUMENT, "argument 'extra_topk_length' needs a V4 plan with an extra pool");
    len.device_id = 1;
    CHECK_ERROR(flashcpp_mla_decode_plan_by_lengths(&cfg, &meta, &splits, &len, NULL, &sizes, NULL),
                FLASHCPP_INVALID_ARGUMENT, "argument 'topk_length' must be on device 0");
    cfg.device_id = 1000;
    cfg.num_sms = 0;
  }
  {
    flashcpp_mla_decode_tensors dt = FLASHCPP_MLA_DECODE_TENSORS_INIT;
    flashcpp_mla_options dp = FLASHCPP_MLA_OPTIONS_INIT;
    flashcpp_tensor extra = kv;
    dt.q = &q;
    dt.kv_cache = &kv;
    dt.indices = &idx;
    dt.out = &out;
    dt.lse = &lse;
    dp.sm_scale = 0.04f;
    CHECK_ERROR(flashcpp_mla_sparse_decode(NULL, &dt, &dp, NULL), FLASHCPP_INVALID_ARGUMENT,
                "argument 'config' must not be NULL");
    /* q has rank 3: decode wants [b, s_q, h_q, 576]. */
    CHECK_ERROR(flashcpp_mla_sparse_decode(&cfg, &dt, &dp, NULL), FLASHCPP_INVALID_ARGUMENT,
                "mla::sparse_decode: argument 'q' must have rank 4");
    dt.extra_kv_cache = &extra; /* the V3.2 cache has no extra pool */
    CHECK_ERROR(flashcpp_mla_sparse_decode(&cfg, &dt, &dp, NULL), FLASHCPP_INVALID_ARGUMENT,
                "argument 'tensors.extra_kv_cache' must be NULL");
  }

  /* V4 decode: the tensors struct, the size-prefixed params, the extra pool's pairing rule. */
  {
    static const int64_t q4_shape[4] = {2, 2, 64, 512}, kv4_shape[4] = {4, 64, 1, 584}, i4_shape[3] = {2, 2, 128};
    static const int64_t x4_shape[3] = {2, 2, 512}, o4_shape[4] = {2, 2, 64, 512}, l4_shape[3] = {2, 2, 64};
    flashcpp_mla_options vp = FLASHCPP_MLA_OPTIONS_INIT;
    flashcpp_mla_decode_tensors vt = FLASHCPP_MLA_DECODE_TENSORS_INIT;
    flashcpp_tensor q4 = make_tensor(fake, FLASHCPP_BF16, FLASHCPP_CUDA, 1000, 4, q4_shape);
    flashcpp_tensor kv4 = make_tensor(fake + (1 << 24), FLASHCPP_U8, FLASHCPP_CUDA, 1000, 4, kv4_shape);
    flashcpp_tensor i4 = make_tensor(fake + (2 << 24), FLASHCPP_I32, FLASHCPP_CUDA, 1000, 3, i4_shape);
    flashcpp_tensor o4 = make_tensor(fake + (3 << 24), FLASHCPP_BF16, FLASHCPP_CUDA, 1000, 4, o4_shape);
    flashcpp_tensor l4 = make_tensor(fake + (4 << 24), FLASHCPP_F32, FLASHCPP_CUDA, 1000, 3, l4_shape);
    flashcpp_tensor xkv = make_tensor(fake + (6 << 24), FLASHCPP_U8, FLASHCPP_CUDA, 1000, 4, kv4_shape);
    flashcpp_tensor xi = make_tensor(fake + (7 << 24), FLASHCPP_I32, FLASHCPP_CUDA, 1000, 3, x4_shape);
    cfg = decode_config(2, 2, 64, 512, 128, 512);
    cfg.device_id = 0;
    CHECK(flashcpp_mla_decode_plan(&cfg, NULL, NULL, &sizes, NULL) == FLASHCPP_SUCCESS, "V4 size query: %s",
          flashcpp_last_error());
    cfg.device_id = 1000;
    vp.sm_scale = 0.04f;
    CHECK_ERROR(flashcpp_mla_sparse_decode_v4(&cfg, NULL, &vp, NULL), FLASHCPP_INVALID_ARGUMENT,
                "flashcpp_mla_sparse_decode_v4: argument 'tensors' must not be NULL");
    CHECK_ERROR(flashcpp_mla_sparse_decode_v4(&cfg, &vt, &vp, NULL), FLASHCPP_INVALID_ARGUMENT,
                "argument 'tensors.q' must not be NULL");
    vp.struct_size = 0;
    CHECK_ERROR(flashcpp_mla_sparse_decode_v4(&cfg, &vt, &vp, NULL), FLASHCPP_INVALID_ARGUMENT,
                "argument 'options' has struct_size 0");
    vp.struct_size = sizeof vp;
    vt.q = &q4;
    vt.kv_cache = &kv4;
    vt.indices = &i4;
    vt.out = &o4;
    vt.lse = &l4;
    vt.extra_kv_cache = &xkv; /* without extra_indices */
    CHECK_ERROR(flashcpp_mla_sparse_decode_v4(&cfg, &vt, &vp, NULL), FLASHCPP_INVALID_ARGUMENT,
                "argument 'extra_indices' must be given together with");
    vt.extra_indices = &xi;
    vp.sm_scale = -1.f;
    CHECK_ERROR(flashcpp_mla_sparse_decode_v4(&cfg, &vt, &vp, NULL), FLASHCPP_INVALID_ARGUMENT,
                "mla::sparse_decode_v4: argument 'sm_scale' must be finite and > 0");
    vp.sm_scale = 0.04f;
    /* Valid in every rule: stops at the device that does not exist (the plan is split: no plan buffers). */
    CHECK(flashcpp_mla_sparse_decode_v4(&cfg, &vt, &vp, NULL) == FLASHCPP_INVALID_ARGUMENT, "V4 decode status");
  }

  /* Quantizer on host memory: success writes the bytes; a failure writes nothing. */
  {
    static uint16_t src[2 * 576];
    static uint8_t dst[2 * 656];
    static const int64_t src_shape[2] = {2, 576}, dst_shape[2] = {2, 656}, bad_shape[2] = {2, 600};
    flashcpp_tensor s, d;
    int i;
    for (i = 0; i < 2 * 576; ++i) src[i] = 0x3f80; /* 1.0 */
    memset(dst, 0xEE, sizeof dst);
    s = make_tensor(src, FLASHCPP_BF16, FLASHCPP_CPU, 0, 2, src_shape);
    d = make_tensor(dst, FLASHCPP_U8, FLASHCPP_CPU, 0, 2, bad_shape);
    CHECK_ERROR(flashcpp_mla_quantize_kv_cache_fp8(&s, &d, NULL), FLASHCPP_INVALID_ARGUMENT,
                "mla::quantize_kv_cache_fp8: argument 'out' must have size 656 in dim 1");
    for (i = 0; i < (int)sizeof dst; ++i) CHECK(dst[i] == 0xEE, "byte %d written on failure", i);
    d = make_tensor(dst, FLASHCPP_U8, FLASHCPP_CPU, 0, 2, dst_shape);
    CHECK(flashcpp_mla_quantize_kv_cache_fp8(&s, &d, NULL) == FLASHCPP_SUCCESS, "quantize: %s", flashcpp_last_error());
    CHECK(dst[0] == 0x78 && dst[656 + 511] == 0x78, "quantized 1.0 -> 0x%02x", dst[0]);
    CHECK(dst[528] == 0x80 && dst[529] == 0x3f, "rope copied");
  }

  /* V4 quantizer on host memory: pages of 2 tokens padded to 1184 bytes (2 * 584 = 1168). */
  {
    static uint16_t src[2 * 2 * 512];
    static uint8_t pages[2 * 1184];
    static const int64_t src_shape[4] = {2, 2, 1, 512}, dst_shape[4] = {2, 2, 1, 584};
    flashcpp_tensor s, d;
    int i;
    for (i = 0; i < 2 * 2 * 512; ++i) src[i] = 0x3f80; /* 1.0 */
    memset(pages, 0xEE, sizeof pages);
    s = make_tensor(src, FLASHCPP_BF16, FLASHCPP_CPU, 0, 4, src_shape);
    d = make_tensor(pages, FLASHCPP_U8, FLASHCPP_CPU, 0, 4, dst_shape);
    d.strides[0] = 1176; /* not a multiple of 16 */
    CHECK_ERROR(flashcpp_mla_quantize_kv_cache_fp8_v4(&s, &d, NULL), FLASHCPP_INVALID_ARGUMENT,
                "mla::quantize_kv_cache_fp8_v4: argument 'out' must have a page stride (dim 0) that is a multiple");
    for (i = 0; i < (int)sizeof pages; ++i) CHECK(pages[i] == 0xEE, "byte %d written on failure", i);
    d.strides[0] = 1184;
    CHECK(flashcpp_mla_quantize_kv_cache_fp8_v4(&s, &d, NULL) == FLASHCPP_SUCCESS, "quantize v4: %s",
          flashcpp_last_error());
    CHECK(pages[0] == 0x78 && pages[1184 + 576 + 447] == 0x78, "quantized 1.0 -> 0x%02x", pages[0]);
    CHECK(pages[448] == 0x80 && pages[449] == 0x3f, "rope copied");
    CHECK(pages[2 * 576] == 119 && pages[2 * 576 + 8 + 6] == 119 && pages[2 * 576 + 15] == 0, "scales 2^-8, pad 0");
    CHECK(pages[1168] == 0xEE && pages[1184 + 1183] == 0xEE, "page padding untouched");
  }
  return 0;
}
