#include "engine/context_shift.h"

#include <algorithm>

#include "media/media_ids.h"

namespace llamux {

namespace {

size_t KeepOf(const Request &r, size_t nCtxSeq) {
  size_t keep = r.p->nKeep < 0 ? r.nPrompt : static_cast<size_t>(r.p->nKeep);
  if (r.p->nKeep >= 0 && !r.tokens.empty() && r.bos >= 0 && r.tokens[0] == r.bos) keep++;
  // room for at least one token after the kept ones, and one to drop
  return std::min(keep, nCtxSeq >= 2 ? nCtxSeq - 2 : 0);
}

// A cut never falls inside a media run (its embeddings only make sense whole, and on M-RoPE
// models its cells share one position): `keep` moves back to the start of the run it would
// split (the run is dropped, not kept in part), the dropped range grows to the end of the run
// it would split. Adjacent runs count as one here (dropped or kept together).
void AvoidMediaCuts(const std::vector<llama_token> &t, size_t *keep, size_t *drop) {
  auto inside = [&](size_t i) { return i > 0 && i < t.size() && media::IsMediaToken(t[i - 1]) && media::IsMediaToken(t[i]); };
  size_t end = *keep + *drop;
  while (inside(*keep)) (*keep)--;
  while (inside(end)) end++;
  *drop = end - *keep;
}

}  // namespace

void FitPrompt(Request &r, size_t nCtxSeq) {
  if (r.p->overflow == Overflow::Stop || r.tokens.size() < nCtxSeq || nCtxSeq < 2) return;
  size_t keep = KeepOf(r, nCtxSeq);
  size_t rest = std::max<size_t>(1, (nCtxSeq - keep) / 2);
  size_t drop = r.tokens.size() - keep - rest;
  AvoidMediaCuts(r.tokens, &keep, &drop);
  r.tokens.erase(r.tokens.begin() + static_cast<long>(keep), r.tokens.begin() + static_cast<long>(keep + drop));
  r.stats.shiftedTokens += static_cast<int32_t>(drop);
}

void ShiftWindow(Request &r, size_t nCtxSeq) {
  size_t total = r.tokens.size();
  size_t keep = KeepOf(r, nCtxSeq);
  // llama-server's rule: half of what follows the kept tokens, and at least what makes room
  size_t discard = std::max(total - nCtxSeq, (total - 1 - keep) / 2);
  AvoidMediaCuts(r.tokens, &keep, &discard);
  Sequence &s = *r.Seq();
  bool moved = r.p->overflow == Overflow::Shift && s.Size() >= keep + discard && s.Shift(keep, discard);
  if (!moved) s.TruncateTo(std::min(keep, s.Size()));  // what stays is recomputed (may keep less)
  r.tokens.erase(r.tokens.begin() + static_cast<long>(keep), r.tokens.begin() + static_cast<long>(keep + discard));
  r.nPast = s.Size();
  r.spec.draft.clear();  // drafted for positions that moved
  r.spec.off = true;
  r.stats.shiftedTokens += static_cast<int32_t>(discard);
}

}  // namespace llamux
