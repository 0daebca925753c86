/* Compiles flashcpp/c/ops.h as C (not C++): the C ABI header must stay valid C, and its *_INIT initializers
 * valid C89 aggregate initializers that put each documented default in its field (the FlashInfer ops' and
 * sparse MLA's). */
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
