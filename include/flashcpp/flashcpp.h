/* flashcpp: the C ABI. Include this one header from C or any language with a C FFI. */
#ifndef FLASHCPP_FLASHCPP_H_
#define FLASHCPP_FLASHCPP_H_
#include "flashcpp/c/common.h"
#include "flashcpp/c/dlpack.h"
#include "flashcpp/c/gdn.h"
#include "flashcpp/c/mla.h"
#include "flashcpp/c/mla_attention.h"
#include "flashcpp/c/moe.h"
#include "flashcpp/c/ops.h"
#include "flashcpp/c/runtime.h"
#include "flashcpp/c/sampling.h"
#include "flashcpp/c/topk.h"
#endif
