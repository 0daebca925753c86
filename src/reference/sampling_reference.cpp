// float64 references of the sampler (flashcpp/sampling.hpp): softmax, and the distribution each sampler draws
// from, written as a renormalized probability matrix (what the top-k/top-p renorm ops return, and what a
// frequency test compares samples against). Token t of a row survives
//   top-k:   fewer than k probabilities of the row are strictly greater than p_t;
//   top-p:   the mass of the probabilities strictly greater than p_t is below top_p;
//   min-p:   p_t >= min_p x max(row);
// the same rules as FlashInfer's pivot kernels (sampling.cuh), which agree with "the k largest" and "the smallest
// prefix of the sorted row whose mass reaches top_p" whenever the row has no ties.
#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "reference/reference_util.hpp"

namespace flashcpp::reference {
namespace {

void check_matrix(const Validator& v, const TensorView& t, const char* arg) {
  detail::check_host_float(v, t, arg);
  v.rank(t, arg, 2);
}

void check_out(const Validator& v, const TensorView& out, const char* arg, const TensorView& in, const char* in_arg) {
  detail::check_host_float(v, out, arg);
  v.same_shape(out, arg, in, in_arg);
}

// The parameter of row r: the scalar, or per_row[r] (a host 1-D tensor with one value per row).
double param_of(const SamplingParam& p, int64_t r) {
  return p.per_row ? load(*p.per_row, r * p.per_row->strides[0]) : p.value;
}
int64_t top_k_of(const TopKParam& k, int64_t r) {
  return k.per_row ? static_cast<int64_t>(load(*k.per_row, r * k.per_row->strides[0])) : k.value;
}

void check_param(const Validator& v, const TensorView* per_row, const char* arg, int64_t rows) {
  if (!per_row) return;
  v.on_host(*per_row, arg).rank(*per_row, arg, 1).dim(*per_row, arg, 0, rows, "rows");
}

// Per row: which tokens survive (keep[i]) given the row's probabilities.
using Filter = std::function<void(const std::vector<double>& p, int64_t row, std::vector<char>& keep)>;

// A sampling parameter's per-row tensor (nullptr: the scalar is used) and its name in messages.
struct PerRowArg {
  const TensorView* per_row;
  const char* name;
};

// Every renorm op: probs a host float matrix, out ("renorm") its like, each parameter's per-row tensor one value
// a row; then per row, the kept probabilities over their sum.
void renorm(const char* op, const TensorView& probs, const TensorView& out, std::initializer_list<PerRowArg> params,
            const Filter& filter) {
  const Validator v(op);
  check_matrix(v, probs, "probs");
  check_out(v, out, "renorm", probs, "probs");
  for (const PerRowArg& p : params) check_param(v, p.per_row, p.name, probs.shape[0]);
  const int64_t rows = probs.shape[0], vocab = probs.shape[1];
  detail::parallel_for(rows, [&](int64_t r) {
    std::vector<double> p(static_cast<size_t>(vocab));
    detail::load_row(probs, r * probs.strides[0], vocab, p.data());
    std::vector<char> keep(p.size(), 0);
    filter(p, r, keep);
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += keep[i] ? p[i] : 0.0;
    for (int64_t i = 0; i < vocab; ++i)
      store(out, r * out.strides[0] + i * out.strides[1], keep[i] && sum > 0 ? p[i] / sum : 0.0);
  });
}

// For each token: how many probabilities are strictly greater, and their mass (sorted once per row).
void ranks_and_mass_above(const std::vector<double>& p, std::vector<int64_t>& greater, std::vector<double>& mass) {
  const size_t n = p.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  greater.assign(n, 0);
  mass.assign(n, 0.0);
  double above = 0;
  size_t i = 0;
  while (i < n) {  // a run of equal values shares the count and mass of what lies strictly above it
    size_t j = i;
    double run = 0;
    while (j < n && p[order[j]] == p[order[i]]) run += p[order[j++]];
    for (size_t t = i; t < j; ++t) {
      greater[order[t]] = static_cast<int64_t>(i);
      mass[order[t]] = above;
    }
    above += run;
    i = j;
  }
}

// A filter on each token's rank (how many tokens are strictly more probable) and the probability mass above it:
// `keep_of(r)` is row r's test, bool(int64_t greater, double mass).
template <class KeepOf>
Filter rank_filter(KeepOf keep_of) {
  return [keep_of](const std::vector<double>& p, int64_t r, std::vector<char>& keep) {
    std::vector<int64_t> greater;
    std::vector<double> mass;
    ranks_and_mass_above(p, greater, mass);
    const auto keeps = keep_of(r);
    for (size_t i = 0; i < p.size(); ++i) keep[i] = keeps(greater[i], mass[i]);
  };
}

Filter top_k_filter(const TopKParam& top_k) {
  return rank_filter([top_k](int64_t r) {
    return [k = top_k_of(top_k, r)](int64_t greater, double) { return greater < k; };
  });
}

Filter top_p_filter(const SamplingParam& top_p) {
  return rank_filter([top_p](int64_t r) {
    return [q = param_of(top_p, r)](int64_t, double mass) { return q >= 1.0 || mass < q; };
  });
}

}  // namespace

void softmax(const TensorView& logits, const TensorView& probs, SamplingParam temperature) {
  const Validator v("reference::softmax");
  check_matrix(v, logits, "logits");
  check_out(v, probs, "probs", logits, "logits");
  const int64_t rows = logits.shape[0], vocab = logits.shape[1];
  check_param(v, temperature.per_row, "temperature", rows);
  detail::parallel_for(rows, [&](int64_t r) {
    std::vector<double> x(static_cast<size_t>(vocab));
    detail::load_row(logits, r * logits.strides[0], vocab, x.data());
    const double t = param_of(temperature, r);
    double m = -std::numeric_limits<double>::infinity();
    for (double& e : x) m = std::max(m, e /= t);
    double sum = 0;
    for (double e : x) sum += std::exp(e - m);
    for (int64_t i = 0; i < vocab; ++i)
      store(probs, r * probs.strides[0] + i * probs.strides[1], std::exp(x[i] - m) / sum);
  });
}

void top_k_renorm_probs(const TensorView& probs, const TensorView& renorm_out, TopKParam top_k) {
  renorm("reference::top_k_renorm_probs", probs, renorm_out, {{top_k.per_row, "top_k"}}, top_k_filter(top_k));
}

void top_p_renorm_probs(const TensorView& probs, const TensorView& renorm_out, SamplingParam top_p) {
  renorm("reference::top_p_renorm_probs", probs, renorm_out, {{top_p.per_row, "top_p"}}, top_p_filter(top_p));
}

void min_p_renorm_probs(const TensorView& probs, const TensorView& renorm_out, SamplingParam min_p) {
  renorm("reference::min_p_renorm_probs", probs, renorm_out, {{min_p.per_row, "min_p"}},
         [min_p](const std::vector<double>& p, int64_t r, std::vector<char>& keep) {
           const double pivot = *std::max_element(p.begin(), p.end()) * param_of(min_p, r);
           for (size_t i = 0; i < p.size(); ++i) keep[i] = p[i] >= pivot;
         });
}

void top_k_top_p_renorm_probs(const TensorView& probs, const TensorView& renorm_out, TopKParam top_k,
                              SamplingParam top_p) {
  renorm("reference::top_k_top_p_renorm_probs", probs, renorm_out,
         {{top_k.per_row, "top_k"}, {top_p.per_row, "top_p"}},
         rank_filter([top_k, top_p](int64_t r) {
           return [k = top_k_of(top_k, r), q = param_of(top_p, r)](int64_t greater, double mass) {
             return greater < k && (q >= 1.0 || mass < q);
           };
         }));
}

void top_k_mask_logits(const TensorView& logits, const TensorView& masked, TopKParam top_k) {
  const Validator v("reference::top_k_mask_logits");
  check_matrix(v, logits, "logits");
  check_out(v, masked, "masked", logits, "logits");
  check_param(v, top_k.per_row, "top_k", logits.shape[0]);
  const int64_t rows = logits.shape[0], vocab = logits.shape[1];
  detail::parallel_for(rows, [&](int64_t r) {
    std::vector<double> x(static_cast<size_t>(vocab));
    detail::load_row(logits, r * logits.strides[0], vocab, x.data());
    std::vector<int64_t> greater;
    std::vector<double> mass;
    ranks_and_mass_above(x, greater, mass);  // the order of logits is the order of their probabilities
    const int64_t k = top_k_of(top_k, r);
    for (int64_t i = 0; i < vocab; ++i)
      store(masked, r * masked.strides[0] + i * masked.strides[1],
            greater[i] < k ? x[i] : -std::numeric_limits<double>::infinity());
  });
}

}  // namespace flashcpp::reference
