#include "speculative.h"

#include <algorithm>

namespace llamux {
namespace spec {

void NgramDraft(const std::vector<llama_token> &tokens, uint32_t ngramMin, uint32_t ngramMax, size_t maxLen,
                std::vector<llama_token> *out) {
  out->clear();
  const size_t size = tokens.size();
  if (maxLen == 0 || ngramMin == 0 || size < 2) return;
  for (size_t n = std::min<size_t>(ngramMax, size - 1); n >= ngramMin && n >= 1; n--) {
    if (size < n + 1) continue;
    const llama_token *key = tokens.data() + size - n;
    // Newest first: recent text (this turn's output, the latest file contents) predicts best.
    for (size_t start = size - n; start-- > 0;) {
      if (tokens[start] != key[0] || !std::equal(key, key + n, tokens.begin() + static_cast<long>(start))) continue;
      size_t from = start + n;  // < size: start < size - n
      size_t len = std::min(maxLen, size - from);
      out->assign(tokens.begin() + static_cast<long>(from), tokens.begin() + static_cast<long>(from + len));
      return;
    }
    if (n == 1) break;
  }
}

namespace {
// Evidence weight kept per verification (about the last 7 count) and per tick without one
// (half of it gone after ~14 ticks).
constexpr double kVerifyDecay = 0.85;
constexpr double kIdleDecay = 0.95;
// Steps of up to this many rows fit the cost line (long prompt chunks are compute-bound and
// cost more per row than a verification's few rows do).
constexpr int32_t kFitRows = CostModel::kMaxRows;
constexpr double kSizeDecay = 0.9;  // per step of that size: the last ~10 count
constexpr double kStepDecay = 0.99;
// Until steps of several sizes were seen, a row is assumed to cost a tenth of a step.
constexpr double kPriorRowShare = 0.1;
constexpr double kPriorWeight = 0.1;  // in rows^2, against the observed variance of step sizes
}  // namespace

void Update(SpecState &s, size_t drafted, size_t accepted) {
  s.kept = s.kept * kVerifyDecay + static_cast<double>(accepted);
  s.missed = s.missed * kVerifyDecay + (accepted < drafted ? 1.0 : 0.0);
}

void Forget(SpecState &s) {
  s.kept = s.kept * kIdleDecay + (1 - kIdleDecay);
  s.missed = s.missed * kIdleDecay + (1 - kIdleDecay);
}

double Acceptance(const SpecState &s) { return s.kept / (s.kept + s.missed); }

void CostModel::ObserveStep(int32_t rows, double ms) {
  if (rows < 1 || rows > kFitRows || !(ms > 0)) return;
  sum_[rows] = sum_[rows] * kSizeDecay + ms;
  count_[rows] = count_[rows] * kSizeDecay + 1;
  const double n = rows;
  w_ = w_ * kStepDecay + 1;
  n_ = n_ * kStepDecay + n;
  t_ = t_ * kStepDecay + ms;
  nn_ = nn_ * kStepDecay + n * n;
  nt_ = nt_ * kStepDecay + n * ms;
}

void CostModel::ObserveDraft(size_t positions, double ms) {
  if (positions == 0 || !(ms >= 0)) return;
  const double per = ms / static_cast<double>(positions);
  draftMs_ = draftMs_ == 0 ? per : draftMs_ * 0.9 + per * 0.1;
}

double CostModel::PerRow() const {
  if (w_ <= 0) return kPriorRowShare;  // (with Fixed() = 1: nothing measured yet)
  const double mn = n_ / w_, mt = t_ / w_;
  const double var = std::max(0.0, nn_ / w_ - mn * mn);
  const double cov = nt_ / w_ - mn * mt;
  const double average = mt / std::max(1.0, mn);  // ms per row of the average step
  const double b = (cov + kPriorWeight * kPriorRowShare * average) / (var + kPriorWeight);
  return std::clamp(b, 0.0, average);
}

double CostModel::Fixed() const {
  if (w_ <= 0) return 1;
  const double mn = n_ / w_, mt = t_ / w_;
  return std::max(mt - PerRow() * mn, 0.0);
}

double CostModel::StepMs(int32_t rows) const {
  if (w_ <= 0) return 0;
  rows = std::clamp<int32_t>(rows, 1, kMaxRows);
  double line = Fixed() + PerRow() * rows;
  // a size seen a few times: its own mean; otherwise the line, but not below a smaller size
  if (count_[rows] >= 2) return sum_[rows] / count_[rows];
  for (int32_t r = rows - 1; r >= 1; r--) {
    if (count_[r] >= 2) return std::max(line, sum_[r] / count_[r]);
  }
  return line;
}

size_t BestLength(double acceptance, size_t maxLen, double tokens, int32_t rows, double extraMs, const CostModel &cost) {
  const double base = cost.StepMs(rows) + extraMs;
  if (!(base > 0)) return maxLen > 0 ? std::min<size_t>(maxLen, 2) : 0;  // nothing measured yet: a short first draft
  size_t best = 0;
  double bestRate = tokens / base;
  double gain = 0, ak = 1;
  for (size_t k = 1; k <= maxLen; k++) {
    ak *= acceptance;
    gain += ak;
    double ms = cost.StepMs(rows + static_cast<int32_t>(k)) + extraMs + static_cast<double>(k) * cost.PerDraftToken();
    double rate = (tokens + gain) / ms;
    if (rate > bestRate * (1 + 1e-9)) {
      best = k;
      bestRate = rate;
    }
  }
  return best;
}

}  // namespace spec
}  // namespace llamux
