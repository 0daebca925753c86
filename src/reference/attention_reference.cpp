// float64 references of FlashInfer's attention ops: one softmax(q k^T * scale) v per query row and head,
// with the causal / sliding-window masks and logits soft cap of FlashInfer's default variant.
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "ops/common.hpp"
#include "reference/reference_util.hpp"

namespace flashcpp::reference {
namespace {

struct AttnSpec {
  bool causal = false;
  int64_t window_left = -1;
  double cap = 0;
  double sm_scale = 1;
};

struct RequestSpan {
  int64_t q_start = 0, qo_len = 0, kv_len = 0;
};

using KvOffset = std::function<int64_t(int64_t request, int64_t j, int64_t kv_head)>;

// q [tokens, hq, dqk], out [tokens, hq, dvo], lse [tokens, hq]; k/v rows located by k_off / v_off.
void attend(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out, OptionalTensor lse,
            int64_t num_requests, int64_t hq, int64_t hkv, int64_t dqk, int64_t dvo, const AttnSpec& spec,
            const std::function<RequestSpan(int64_t)>& request, const KvOffset& k_off, const KvOffset& v_off) {
  const int64_t group = hq / hkv;
  detail::parallel_for(num_requests * hkv, [&](int64_t task) {
    const int64_t r = task / hkv, kvh = task % hkv;
    const RequestSpan span = request(r);
    if (span.qo_len == 0) return;
    std::vector<double> kbuf(static_cast<size_t>(span.kv_len * dqk)), vbuf(static_cast<size_t>(span.kv_len * dvo));
    for (int64_t j = 0; j < span.kv_len; ++j) {
      detail::load_row(k, k_off(r, j, kvh), dqk, kbuf.data() + j * dqk);
      detail::load_row(v, v_off(r, j, kvh), dvo, vbuf.data() + j * dvo);
    }
    std::vector<double> qrow(static_cast<size_t>(dqk)), s(static_cast<size_t>(span.kv_len)),
        acc(static_cast<size_t>(dvo));
    std::vector<char> keep(static_cast<size_t>(span.kv_len));
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      for (int64_t i = 0; i < span.qo_len; ++i) {
        const int64_t row = span.q_start + i;
        detail::load_row(q, offset_of(q, {row, h, 0}), dqk, qrow.data());
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < span.kv_len; ++j) {
          bool visible = true;
          if (spec.causal && j > i + span.kv_len - span.qo_len) visible = false;
          if (spec.window_left >= 0 && j + span.qo_len + spec.window_left < span.kv_len + i) visible = false;
          keep[static_cast<size_t>(j)] = visible;
          if (!visible) continue;
          double dot = 0;
          const double* kr = kbuf.data() + j * dqk;
          for (int64_t e = 0; e < dqk; ++e) dot += qrow[e] * kr[e];
          double score = dot * spec.sm_scale;
          if (spec.cap > 0) score = spec.cap * std::tanh(score / spec.cap);
          s[static_cast<size_t>(j)] = score;
          m = std::max(m, score);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double denom = 0;
        if (m > -std::numeric_limits<double>::infinity()) {
          for (int64_t j = 0; j < span.kv_len; ++j) {
            if (!keep[static_cast<size_t>(j)]) continue;
            const double p = std::exp(s[static_cast<size_t>(j)] - m);
            denom += p;
            const double* vr = vbuf.data() + j * dvo;
            for (int64_t e = 0; e < dvo; ++e) acc[e] += p * vr[e];
          }
        }
        const int64_t o_off = offset_of(out, {row, h, 0});
        const int64_t os = out.strides[2];
        for (int64_t e = 0; e < dvo; ++e) store(out, o_off + e * os, denom > 0 ? acc[e] / denom : 0.0);
        if (lse) {
          const double l = denom > 0 ? (m + std::log(denom)) / std::log(2.0) : -std::numeric_limits<double>::infinity();
          store(*lse, offset_of(*lse, {row, h}), l);
        }
      }
    }
  });
}

void check_lse(const Validator& v, OptionalTensor lse, int64_t tokens, int64_t hq) {
  if (!lse) return;
  detail::check_host_float(v, *lse, "lse");
  v.shape(*lse, "lse", {tokens, hq});
}

// q [tokens, hq, dqk] of a batch and its qo_indptr over those tokens: returns the batch size.
int64_t check_batch_q(const Validator& v, const TensorView& q, const TensorView& qo_indptr) {
  detail::check_host_float(v, q, "q");
  v.rank(q, "q", 3);
  v.indptr(qo_indptr, "qo_indptr", -1, q.size(0));
  return qo_indptr.size(0) - 1;
}

// What every attention reference checks once q and k/v are read: head grouping, out [tokens, hq, dvo], lse,
// and the mask/scale options, by the ops' own rules (one message for the same mistake).
template <class Options>
AttnSpec check_out_and_spec(const Validator& v, const TensorView& out, OptionalTensor lse, int64_t tokens, int64_t hq,
                            int64_t hkv, int64_t dqk, int64_t dvo, bool causal, const Options& o) {
  v.require(hkv >= 1 && hq % hkv == 0, "q", "must have a head count divisible by num_kv_heads");
  detail::check_host_float(v, out, "out");
  v.shape(out, "out", {tokens, hq, dvo});
  check_lse(v, lse, tokens, hq);
  ops::check_window_and_cap(v, o.window_left, o.logits_soft_cap);
  return {causal, o.window_left, o.logits_soft_cap, ops::resolve_sm_scale(v, o.sm_scale, dqk)};
}

// k/v [tokens, H, D] (NHD) or [H, tokens, D] (HND): returns (kv_len, hkv).
std::pair<int64_t, int64_t> check_kv3(const Validator& v, const TensorView& k, const TensorView& vv, KvLayout layout,
                                      int64_t dqk) {
  detail::check_host_float(v, k, "k");
  detail::check_host_float(v, vv, "v");
  v.rank(k, "k", 3).rank(vv, "v", 3).dim(k, "k", 2, dqk, "q.size(-1)");
  const bool nhd = layout == KvLayout::nhd;
  const int64_t kv_len = nhd ? k.size(0) : k.size(1), hkv = nhd ? k.size(1) : k.size(0);
  if (nhd) v.shape(vv, "v", {kv_len, hkv, -1});
  else v.shape(vv, "v", {hkv, kv_len, -1});
  return {kv_len, hkv};
}

KvOffset kv3_offset(const TensorView& t, KvLayout layout, const std::function<int64_t(int64_t)>& start) {
  if (layout == KvLayout::nhd)
    return [&t, start](int64_t r, int64_t j, int64_t h) { return offset_of(t, {start(r) + j, h, 0}); };
  return [&t, start](int64_t r, int64_t j, int64_t h) { return offset_of(t, {h, start(r) + j, 0}); };
}

// Paged cache geometry and per-request lengths from the host page table.
struct PagedInfo {
  int64_t page_size = 0, hkv = 0, d = 0;
  std::vector<int64_t> kv_len;
};

PagedInfo check_paged(const Validator& v, const PagedKvCache& kv, int64_t batch) {
  detail::check_host_float(v, kv.k_cache, "k_cache");
  detail::check_host_float(v, kv.v_cache, "v_cache");
  v.rank(kv.k_cache, "k_cache", 4).same_shape(kv.v_cache, "v_cache", kv.k_cache, "k_cache");
  const bool nhd = kv.layout == KvLayout::nhd;
  PagedInfo p;
  p.page_size = nhd ? kv.k_cache.size(1) : kv.k_cache.size(2);
  p.hkv = nhd ? kv.k_cache.size(2) : kv.k_cache.size(1);
  p.d = kv.k_cache.size(3);
  detail::check_host_i32(v, kv.last_page_len, "last_page_len", batch);
  detail::check_host_i32(v, kv.indices, "indices", -1);
  std::vector<int32_t> lens(static_cast<size_t>(batch));
  paged_kv_lengths(kv.indptr, kv.last_page_len, p.page_size,
                   TensorView::contiguous(lens.data(), DType::i32, Device::cpu(), {batch}));
  const int32_t* ptr = kv.indptr.data_as<const int32_t>();
  if (ptr[batch] > kv.indices.size(0)) v.fail("indices", "is shorter than indptr[batch]");
  v.values_in_range(TensorView::contiguous(kv.indices.data, DType::i32, kv.indices.device, {ptr[batch]}), "indices",
                    0, kv.k_cache.size(0));
  p.kv_len.assign(lens.begin(), lens.end());
  return p;
}

KvOffset paged_offset(const TensorView& cache, const PagedKvCache& kv, int64_t page_size) {
  const int32_t* ptr = kv.indptr.data_as<const int32_t>();
  const int32_t* idx = kv.indices.data_as<const int32_t>();
  const bool nhd = kv.layout == KvLayout::nhd;
  return [&cache, ptr, idx, nhd, page_size](int64_t r, int64_t j, int64_t h) {
    const int64_t page = idx[ptr[r] + j / page_size], e = j % page_size;
    return nhd ? offset_of(cache, {page, e, h, 0}) : offset_of(cache, {page, h, e, 0});
  };
}

TensorView as_rank3(const TensorView& t) {  // [H, D] -> [1, H, D]
  return TensorView::strided(t.data, t.dtype, t.device, {1, t.size(0), t.size(1)},
                             {t.size(0) * t.strides[0], t.strides[0], t.strides[1]});
}

}  // namespace

void single_prefill(const TensorView& q, const TensorView& k, const TensorView& vv, const TensorView& out,
                    OptionalTensor lse, const SinglePrefillOptions& o) {
  const Validator v("reference::single_prefill");
  detail::check_host_float(v, q, "q");
  v.rank(q, "q", 3);
  const int64_t qo_len = q.size(0), hq = q.size(1), dqk = q.size(2);
  const auto [kv_len, hkv] = check_kv3(v, k, vv, o.layout, dqk);
  const int64_t dvo = vv.size(2);
  const AttnSpec spec = check_out_and_spec(v, out, lse, qo_len, hq, hkv, dqk, dvo, o.causal, o);
  const auto zero = [](int64_t) { return int64_t{0}; };
  attend(q, k, vv, out, lse, 1, hq, hkv, dqk, dvo, spec, [&](int64_t) { return RequestSpan{0, qo_len, kv_len}; },
         kv3_offset(k, o.layout, zero), kv3_offset(vv, o.layout, zero));
}

void single_decode(const TensorView& q, const TensorView& k, const TensorView& vv, const TensorView& out,
                   OptionalTensor lse, const SingleDecodeOptions& o) {
  const Validator v("reference::single_decode");
  detail::check_host_float(v, q, "q");
  v.rank(q, "q", 2);
  detail::check_host_float(v, out, "out");
  v.rank(out, "out", 2);
  SinglePrefillOptions p;
  p.layout = o.layout;
  p.window_left = o.window_left;
  p.logits_soft_cap = o.logits_soft_cap;
  p.sm_scale = o.sm_scale;
  TensorView l2;
  if (lse) {
    detail::check_host_float(v, *lse, "lse");
    v.rank(*lse, "lse", 1);
    l2 = TensorView::strided(lse->data, lse->dtype, lse->device, {1, lse->size(0)},
                             {lse->size(0) * lse->strides[0], lse->strides[0]});
  }
  single_prefill(as_rank3(q), k, vv, as_rank3(out), lse ? &l2 : nullptr, p);
}

void batch_prefill_ragged(const TensorView& q, const TensorView& k, const TensorView& vv, const TensorView& qo_indptr,
                          const TensorView& kv_indptr, const TensorView& out, OptionalTensor lse,
                          const BatchPrefillConfig& c) {
  const Validator v("reference::batch_prefill_ragged");
  const int64_t batch = check_batch_q(v, q, qo_indptr);
  const int64_t hq = q.size(1), dqk = q.size(2);
  const auto [kv_total, hkv] = check_kv3(v, k, vv, c.layout, dqk);
  v.indptr(kv_indptr, "kv_indptr", batch + 1, kv_total);
  const int64_t dvo = vv.size(2);
  const AttnSpec spec = check_out_and_spec(v, out, lse, q.size(0), hq, hkv, dqk, dvo, c.causal, c);
  const int32_t* qp = qo_indptr.data_as<const int32_t>();
  const int32_t* kp = kv_indptr.data_as<const int32_t>();
  const auto start = [kp](int64_t r) { return int64_t{kp[r]}; };
  attend(q, k, vv, out, lse, batch, hq, hkv, dqk, dvo, spec,
         [&](int64_t r) { return RequestSpan{qp[r], qp[r + 1] - qp[r], kp[r + 1] - kp[r]}; },
         kv3_offset(k, c.layout, start), kv3_offset(vv, c.layout, start));
}

void batch_prefill_paged(const TensorView& q, const PagedKvCache& kv, const TensorView& qo_indptr,
                         const TensorView& out, OptionalTensor lse, const BatchPrefillConfig& c) {
  const Validator v("reference::batch_prefill_paged");
  const int64_t batch = check_batch_q(v, q, qo_indptr);
  const int64_t hq = q.size(1), dqk = q.size(2);
  const PagedInfo p = check_paged(v, kv, batch);
  v.require(p.d == dqk, "k_cache", "must have head_dim q.size(2)");
  const AttnSpec spec = check_out_and_spec(v, out, lse, q.size(0), hq, p.hkv, dqk, dqk, c.causal, c);
  const int32_t* qp = qo_indptr.data_as<const int32_t>();
  attend(q, kv.k_cache, kv.v_cache, out, lse, batch, hq, p.hkv, dqk, dqk, spec,
         [&](int64_t r) { return RequestSpan{qp[r], qp[r + 1] - qp[r], p.kv_len[static_cast<size_t>(r)]}; },
         paged_offset(kv.k_cache, kv, p.page_size), paged_offset(kv.v_cache, kv, p.page_size));
}

void batch_decode(const TensorView& q, const PagedKvCache& kv, const TensorView& out, OptionalTensor lse,
                  const BatchDecodeConfig& c) {
  const Validator v("reference::batch_decode");
  detail::check_host_float(v, q, "q");
  v.rank(q, "q", 3);
  const int64_t batch = q.size(0), hq = q.size(1), d = q.size(2);
  const PagedInfo p = check_paged(v, kv, batch);
  v.require(p.d == d, "k_cache", "must have head_dim q.size(2)");
  const AttnSpec spec = check_out_and_spec(v, out, lse, batch, hq, p.hkv, d, d, false, c);
  attend(q, kv.k_cache, kv.v_cache, out, lse, batch, hq, p.hkv, d, d, spec,
         [&](int64_t r) { return RequestSpan{r, 1, p.kv_len[static_cast<size_t>(r)]}; },
         paged_offset(kv.k_cache, kv, p.page_size), paged_offset(kv.v_cache, kv, p.page_size));
}

}  // namespace flashcpp::reference
