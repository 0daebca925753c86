/* Compiles flashcpp/c/ops.h as C (not C++): the C ABI header must stay valid C. */
#include "flashcpp/flashcpp.h"

int flashcpp_ops_header_is_c(void) {
  flashcpp_attention_options o;
  flashcpp_batch_prefill_config p;
  flashcpp_batch_decode_config d;
  flashcpp_attention_options_init(&o);
  flashcpp_batch_prefill_config_init(&p);
  flashcpp_batch_decode_config_init(&d);
  return (int)(o.window_left + p.fixed_split_size + d.window_left);
}
