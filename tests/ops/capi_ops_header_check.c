/* Compiles flashcpp/c/ops.h as C (not C++): the C ABI header must stay valid C, and its *_INIT initializers
 * valid C89 aggregate initializers that put each documented default in its field (the FlashInfer ops' and
 * sparse MLA's), every one setting struct_size, the bundles of tensors' (C ABI 4.0.0) included. */
#include "flashcpp/flashcpp.h"

int flashcpp_ops_header_is_c(void) {
  flashcpp_attention_options o;
  flashcpp_batch_prefill_config p;
  flashcpp_batch_decode_config d;
  flashcpp_attention_options oi = FLASHCPP_ATTENTION_OPTIONS_INIT;
  flashcpp_batch_prefill_config pi = FLASHCPP_BATCH_PREFILL_CONFIG_INIT;
  flashcpp_batch_decode_config di = FLASHCPP_BATCH_DECODE_CONFIG_INIT;
  flashcpp_batch_mla_config mi = FLASHCPP_BATCH_MLA_CONFIG_INIT;
  flashcpp_gdn_prefill_args gi = FLASHCPP_GDN_PREFILL_ARGS_INIT;
  flashcpp_fused_moe_config ci = FLASHCPP_FUSED_MOE_CONFIG_INIT;
  flashcpp_fused_moe_args ai = FLASHCPP_FUSED_MOE_ARGS_INIT;
  flashcpp_mla_decode_config xi = FLASHCPP_MLA_DECODE_CONFIG_INIT;
  flashcpp_mla_options pp = FLASHCPP_MLA_OPTIONS_INIT;
  flashcpp_rope_quantize_args ri = FLASHCPP_ROPE_QUANTIZE_ARGS_INIT;
  flashcpp_rope_quantize_append_args ra = FLASHCPP_ROPE_QUANTIZE_APPEND_ARGS_INIT;
  flashcpp_mla_dense_decode_config dc = FLASHCPP_MLA_DENSE_DECODE_CONFIG_INIT;
  flashcpp_mla_dense_decode_options dO = FLASHCPP_MLA_DENSE_DECODE_OPTIONS_INIT;
  flashcpp_sampling_options so = FLASHCPP_SAMPLING_OPTIONS_INIT;
  flashcpp_mla_prefill_tensors bt1 = FLASHCPP_MLA_PREFILL_TENSORS_INIT;
  flashcpp_mla_decode_tensors bt2 = FLASHCPP_MLA_DECODE_TENSORS_INIT;
  flashcpp_mla_dense_decode_workspace bt3 = FLASHCPP_MLA_DENSE_DECODE_WORKSPACE_INIT;
  flashcpp_mla_dense_decode_tensors bt4 = FLASHCPP_MLA_DENSE_DECODE_TENSORS_INIT;
  flashcpp_batch_mla_cache bt5 = FLASHCPP_BATCH_MLA_CACHE_INIT;
  flashcpp_paged_kv_cache bt6 = FLASHCPP_PAGED_KV_CACHE_INIT;
  flashcpp_paged_mla_kv_cache bt7 = FLASHCPP_PAGED_MLA_KV_CACHE_INIT;
  flashcpp_workspace bt8 = FLASHCPP_WORKSPACE_INIT;
  flashcpp_ragged_kv bt9 = FLASHCPP_RAGGED_KV_INIT;
  flashcpp_sampling_workspace bt10 = FLASHCPP_SAMPLING_WORKSPACE_INIT;
  flashcpp_attention_options_init(&o);
  flashcpp_batch_prefill_config_init(&p);
  flashcpp_batch_decode_config_init(&d);
  if (oi.struct_size != sizeof oi || pi.struct_size != sizeof pi || di.struct_size != sizeof di) return 1;
  if (mi.struct_size != sizeof mi || gi.struct_size != sizeof gi || ci.struct_size != sizeof ci ||
      ai.struct_size != sizeof ai || xi.struct_size != sizeof xi || pp.struct_size != sizeof pp)
    return 6;
  if (mi.q_dtype != FLASHCPP_BF16 || mi.sm_scale != 0.0 || gi.output != NULL || gi.scale != 0.0 ||
      ci.output_dtype != FLASHCPP_BF16 || ai.enable_pdl != 0 || ai.activation != 3 || ai.tp_size != 1 ||
      ai.ep_size != 1 || xi.d_qk != 576 || xi.extra_topk != 0 || pp.d_v != 512)
    return 7;
  if (ri.struct_size != sizeof ri || ri.q_rope != NULL || ri.k_nope_out != NULL || ri.pos_ids != NULL ||
      ri.interleave != 0 || ri.enable_pdl != 0 || ri.quant_scale_q != 1.0 || ri.quant_scale_kv != 1.0)
    return 8;
  if (ra.struct_size != sizeof ra || ra.q_rope != NULL || ra.v != NULL || ra.kv_cache != NULL || ra.mla_cache != NULL ||
      ra.interleave != 0 || ra.enable_pdl != 0 || ra.quant_scale_q != 1.0 || ra.quant_scale_kv != 1.0)
    return 9;
  if (dc.struct_size != sizeof dc || dc.s_q != 1 || dO.struct_size != sizeof dO || dO.sm_scale != 0.0f ||
      so.struct_size != sizeof so || so.deterministic != 1)
    return 10;
  /* The bundles: struct_size set, every tensor NULL (the paged cache NHD). */
  if (bt1.struct_size != sizeof bt1 || bt1.q != NULL || bt1.lse != NULL || bt2.struct_size != sizeof bt2 ||
      bt2.q != NULL || bt2.extra_topk_length != NULL || bt3.struct_size != sizeof bt3 || bt3.token_lengths != NULL ||
      bt4.struct_size != sizeof bt4 || bt4.lse != NULL || bt5.struct_size != sizeof bt5 || bt5.kv_indices != NULL)
    return 11;
  if (bt6.struct_size != sizeof bt6 || bt6.k_cache != NULL || bt6.last_page_len != NULL ||
      bt6.layout != FLASHCPP_KV_NHD || bt7.struct_size != sizeof bt7 || bt7.last_page_len != NULL ||
      bt8.struct_size != sizeof bt8 || bt8.pinned_int_buffer != NULL || bt9.struct_size != sizeof bt9 ||
      bt9.indptr != NULL || bt10.struct_size != sizeof bt10 || bt10.row_states != NULL)
    return 12;
  if (o.struct_size != sizeof o || p.struct_size != sizeof p || d.struct_size != sizeof d) return 2;
  if (oi.causal != 0 || oi.window_left != -1 || oi.sm_scale != 0.0 || oi.use_fp16_qk_reduction != 0) return 3;
  if (pi.kv_storage != FLASHCPP_KV_PAGED || pi.q_dtype != FLASHCPP_BF16 || pi.kv_dtype != FLASHCPP_BF16 ||
      pi.o_dtype != -1 || pi.window_left != -1 || pi.fixed_split_size != -1 || pi.disable_split_kv != 0)
    return 4;
  if (di.q_dtype != FLASHCPP_BF16 || di.kv_dtype != FLASHCPP_BF16 || di.o_dtype != -1 || di.window_left != -1 ||
      di.enable_pdl != 0)
    return 5;
  return (int)(o.window_left + p.fixed_split_size + d.window_left);
}
