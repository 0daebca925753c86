// Helpers of the float64 references: host-tensor validation, rows as float, a parallel loop.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/check.hpp"
#include "flashcpp/reference.hpp"

namespace flashcpp::reference::detail {

/// Host tensor of a floating dtype (f16, bf16, f32, f64).
void check_host_float(const Validator& v, const TensorView& t, const char* arg);
/// Host int32 1-D array.
void check_host_i32(const Validator& v, const TensorView& t, const char* arg, int64_t len);
/// Reads n elements starting at `offset` with the view's last-dim stride into dst (as double).
void load_row(const TensorView& t, int64_t offset, int64_t n, double* dst);
/// Runs fn(i) for i in [0, n) over the host's hardware threads (serially for small n).
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);
/// The same on at most `max_threads` threads (<= 1: inline, on the calling thread). The first exception
/// fn throws is rethrown once every worker has stopped.
void parallel_for(int64_t n, int max_threads, const std::function<void(int64_t)>& fn);

}  // namespace flashcpp::reference::detail
