#include "sampling/marker_matcher.h"

#include <algorithm>

namespace llamux {

void MarkerMatcher::Candidates(std::vector<const std::vector<llama_token> *> *c) const {
  c->clear();
  switch (region_) {
    case Region::Text:
      c->push_back(&m_->start);
      break;
    case Region::Wrapper:
      c->push_back(&m_->end);
      if (m_->HasPayload()) c->push_back(&m_->payloadStart);
      break;
    case Region::Payload:
      c->push_back(&m_->payloadEnd);
      break;
  }
}

void MarkerMatcher::Release(size_t n, std::vector<Output> *out) {
  if (n == 0) return;
  Kind kind = region_ == Region::Text ? Kind::Text : Kind::Body;
  if (!out->empty() && out->back().kind == kind) {
    out->back().tokens.insert(out->back().tokens.end(), held_.begin(), held_.begin() + static_cast<long>(n));
  } else {
    out->push_back({kind, std::vector<llama_token>(held_.begin(), held_.begin() + static_cast<long>(n))});
  }
  held_.erase(held_.begin(), held_.begin() + static_cast<long>(n));
}

void MarkerMatcher::Push(llama_token t, std::vector<Output> *out) {
  held_.push_back(t);
  std::vector<const std::vector<llama_token> *> cands;
  Candidates(&cands);
  // 1) A candidate marker completed as a suffix of the held tokens (longest wins).
  const std::vector<llama_token> *hit = nullptr;
  for (const auto *m : cands) {
    if (m->empty() || m->size() > held_.size()) continue;
    if (std::equal(m->begin(), m->end(), held_.end() - static_cast<long>(m->size()))) {
      if (hit == nullptr || m->size() > hit->size()) hit = m;
    }
  }
  if (hit != nullptr) {
    Release(held_.size() - hit->size(), out);
    Kind kind;
    if (hit == &m_->start) {
      kind = Kind::Open;
      region_ = Region::Wrapper;
    } else if (hit == &m_->end) {
      kind = Kind::Close;
      region_ = Region::Text;
    } else if (hit == &m_->payloadStart) {
      kind = Kind::PayloadOpen;
      region_ = Region::Payload;
    } else {
      kind = Kind::PayloadClose;
      region_ = Region::Wrapper;
    }
    out->push_back({kind, held_});
    held_.clear();
    return;
  }
  // 2) Keep only the longest suffix that is still a proper prefix of a candidate.
  size_t keep = 0;
  for (const auto *m : cands) {
    size_t maxk = std::min(m->size() > 0 ? m->size() - 1 : 0, held_.size());
    for (size_t k = maxk; k > keep; k--) {
      if (std::equal(m->begin(), m->begin() + static_cast<long>(k), held_.end() - static_cast<long>(k))) {
        keep = k;
        break;
      }
    }
  }
  Release(held_.size() - keep, out);
}

void MarkerMatcher::Flush(std::vector<Output> *out) { Release(held_.size(), out); }

}  // namespace llamux
