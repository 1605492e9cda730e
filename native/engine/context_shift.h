// Context shift (RequestParams::overflow): what a request does when its sequence is full,
// instead of failing (a prompt) or ending with `length` (generation).
//   Shift:     the first `keep` tokens stay, the oldest half of the rest is dropped and the
//              cells after it move down (Sequence::Shift; llama.cpp re-rotates their K). The
//              KV past `keep` is then the request's own: no cache serves it to anyone else
//              (Sequence::ExactPrefix), only the session that owns the sequence continues on it.
//   Reprefill: the same token window, recomputed from `keep` on: a cold prefill of the new
//              list, so every cache stays exact. Shift falls back to it where the memory cannot
//              shift (recurrent/hybrid) or the cells to move are shared with another sequence.
// `keep` is nKeep plus the BOS token when the prompt starts with one (as llama-server counts
// n_keep), or the whole prompt for nKeep -1; at least one token is dropped per shift.
// A media run is never cut: `keep` moves back to the start of a run it would split (the run is
// dropped whole), the dropped range grows to the end of a run it would split. On M-RoPE models
// (media runs with their own positions, Sequence::PosAt) the KV cannot shift at all: Shift
// falls back to Reprefill there.
#pragma once
#include <cstddef>

#include "engine/request_state.h"

namespace llamux {

// Cuts a prompt (r.tokens, nothing computed yet) that does not fit a sequence of nCtxSeq
// tokens: keeps `keep` and the newest tokens, half the rest of the window. Counts what it
// dropped in r.stats.shiftedTokens. No-op when it fits or the request does not shift.
void FitPrompt(Request &r, size_t nCtxSeq);

// A generating request whose next token has no position left (r.tokens.size() > nCtxSeq):
// shifts or re-prefills its window. Afterwards r.nPast == r.Seq()->Size() and the tokens not in
// the KV are decoded again (one, after a KV shift; the window from `keep` on, after a re-prefill).
void ShiftWindow(Request &r, size_t nCtxSeq);

// Whether ShiftWindow is due for this request now.
inline bool ShiftDue(const Request &r, size_t nCtxSeq) {
  return r.p->overflow != Overflow::Stop && !r.Done() && r.Seq() != nullptr && r.tokens.size() > nCtxSeq;
}

}  // namespace llamux
