/* Size-prefixed C structs as a C caller sees them (compiled as C): a struct_size of the struct's first published
 * size is accepted, one above the library's sizeof or below the first size refused, naming the size and the range.
 * Every struct in the table (src/capi/capi.hpp) is unchanged since it first began with its size, so its first
 * published size is its sizeof; a struct grown in a MINOR release would be tested here with its old layout.
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
  return 0;
}
