/* Compiles flashcpp/c/ops.h as C (not C++): the C ABI header must stay valid C, and its *_INIT initializers
 * valid C89 aggregate initializers that put each documented default in its field. */
#include "flashcpp/flashcpp.h"

int flashcpp_ops_header_is_c(void) {
  flashcpp_attention_options o;
  flashcpp_batch_prefill_config p;
  flashcpp_batch_decode_config d;
  flashcpp_attention_options oi = FLASHCPP_ATTENTION_OPTIONS_INIT;
  flashcpp_batch_prefill_config pi = FLASHCPP_BATCH_PREFILL_CONFIG_INIT;
  flashcpp_batch_decode_config di = FLASHCPP_BATCH_DECODE_CONFIG_INIT;
  flashcpp_attention_options_init(&o);
  flashcpp_batch_prefill_config_init(&p);
  flashcpp_batch_decode_config_init(&d);
  if (oi.struct_size != sizeof oi || pi.struct_size != sizeof pi || di.struct_size != sizeof di) return 1;
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
