#include "speculative/draft_model.h"

#include <algorithm>
#include <cstring>

#include "engine/batch.h"
#include "engine/request_state.h"

namespace llamux {

DraftModel::~DraftModel() {
  if (batch_.token != nullptr) llama_batch_free(batch_);
  seqs_.clear();
  if (ctx_ != nullptr) llama_free(ctx_);
}

// Same vocabulary: the same size and the same text for every token (the draft's ids are the
// target's ids).
static bool SameVocab(const llama_vocab *a, const llama_vocab *b) {
  int32_t n = llama_vocab_n_tokens(a);
  if (n != llama_vocab_n_tokens(b)) return false;
  for (int32_t t = 0; t < n; t++) {
    const char *x = llama_vocab_get_text(a, t);
    const char *y = llama_vocab_get_text(b, t);
    if ((x == nullptr) != (y == nullptr) || (x != nullptr && std::strcmp(x, y) != 0)) return false;
  }
  return true;
}

bool DraftModel::Start(llama_model *model, const llama_model *target, uint32_t contextSize, uint32_t sequences, int32_t threads,
                       std::string *error) {
  vocab_ = llama_model_get_vocab(model);
  if (!SameVocab(vocab_, llama_model_get_vocab(target))) {
    *error = "the draft model's vocabulary differs from the model's (speculative drafts must use the same token ids)";
    return false;
  }
  if (llama_model_is_recurrent(model) || llama_model_is_hybrid(model)) {
    *error = "a recurrent or hybrid draft model cannot drop rejected draft tokens";
    return false;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = contextSize;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_seq_max = sequences;
  cp.kv_unified = true;
  // One thread: a draft step is a few hundred microseconds of work, and several threads meeting
  // at every graph node cost more than they save (worse on a busy machine: measured 7 tok/s
  // against 22-100 without speculation with 2 threads, bench --suite speculative).
  (void)threads;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.no_perf = true;
  try {
    ctx_ = llama_init_from_model(model, cp);
  } catch (const std::exception &e) {
    ctx_ = nullptr;
  }
  if (ctx_ == nullptr) {
    *error = "llama.cpp could not create the draft model's context";
    return false;
  }
  capacity_ = static_cast<int32_t>(llama_n_batch(ctx_));
  batch_ = llama_batch_init(capacity_, 0, 1);
  seqs_.reserve(sequences);
  for (uint32_t i = 0; i < sequences; i++) {
    seqs_.emplace_back(ctx_, static_cast<int32_t>(i));
    seqs_.back().SetMaxCheckpoints(0);
  }
  return true;
}

void DraftModel::Add(Sequence &s, llama_token tok, size_t pos, bool logits) {
  PushRow(batch_, tok, static_cast<llama_pos>(pos), s.Id(), logits);
}

bool DraftModel::Decode() { return GuardedDecode(ctx_, batch_) == 0; }

void DraftModel::Draft(const std::vector<Request *> &reqs, const std::vector<size_t> &maxLen) {
  const size_t n = reqs.size();
  if (n == 0 || ctx_ == nullptr) return;
  // 1) Each draft sequence mirrors its request's tokens up to the pending one (whose logits
  //    give the first draft token): keep the common prefix, prefill the rest in chunks.
  std::vector<size_t> fed(n), logitIdx(n, 0);
  for (size_t i = 0; i < n; i++) {
    Request &r = *reqs[i];
    Sequence &s = seqs_[static_cast<size_t>(r.Seq()->Id())];
    const auto &have = s.Tokens();
    size_t common = 0;
    size_t limit = std::min(have.size(), r.tokens.size() - 1);
    while (common < limit && have[common] == r.tokens[common]) common++;
    fed[i] = s.TruncateTo(common);
  }
  auto fail = [&]() {
    for (auto &s : seqs_) s.Clear();
    for (Request *r : reqs) r->spec.draft.clear();
  };
  // All but each request's last token, in chunks; then the last tokens together, with logits
  // (logits belong to the last decode only, so they must all come from one batch). Usually the
  // catch-up (the tokens accepted since the last draft) fits beside the last tokens: one decode.
  size_t pending = 0;
  for (size_t i = 0; i < n; i++) pending += reqs[i]->tokens.size() - fed[i];
  const bool oneBatch = pending <= static_cast<size_t>(capacity_);
  while (!oneBatch) {
    batch_.n_tokens = 0;
    std::vector<size_t> added(n, 0);
    for (size_t i = 0; i < n && batch_.n_tokens < capacity_; i++) {
      Request &r = *reqs[i];
      Sequence &s = seqs_[static_cast<size_t>(r.Seq()->Id())];
      while (fed[i] + added[i] + 1 < r.tokens.size() && batch_.n_tokens < capacity_) {
        size_t pos = fed[i] + added[i];
        Add(s, r.tokens[pos], pos, false);
        added[i]++;
      }
    }
    if (batch_.n_tokens == 0) break;
    if (!Decode()) return fail();
    for (size_t i = 0; i < n; i++) {
      if (added[i] == 0) continue;
      Request &r = *reqs[i];
      seqs_[static_cast<size_t>(r.Seq()->Id())].Append(r.tokens.data() + fed[i], added[i]);
      fed[i] += added[i];
    }
  }
  batch_.n_tokens = 0;
  for (size_t i = 0; i < n; i++) {
    Request &r = *reqs[i];
    Sequence &s = seqs_[static_cast<size_t>(r.Seq()->Id())];
    for (size_t pos = fed[i]; pos + 1 < r.tokens.size(); pos++) Add(s, r.tokens[pos], pos, false);
    logitIdx[i] = static_cast<size_t>(batch_.n_tokens);
    Add(s, r.tokens.back(), r.tokens.size() - 1, true);
  }
  if (!Decode()) return fail();
  for (size_t i = 0; i < n; i++) {
    Request &r = *reqs[i];
    seqs_[static_cast<size_t>(r.Seq()->Id())].Append(r.tokens.data() + fed[i], r.tokens.size() - fed[i]);
  }
  // 2) Greedy steps for every request at once; a request stops at its length or an EOG token.
  std::vector<bool> active(n, true);
  for (size_t i = 0; i < n; i++) {
    reqs[i]->spec.draft.clear();
    active[i] = maxLen[i] > 0;
  }
  while (true) {
    batch_.n_tokens = 0;
    for (size_t i = 0; i < n; i++) {
      if (!active[i]) continue;
      Request &r = *reqs[i];
      const float *logits = llama_get_logits_ith(ctx_, static_cast<int32_t>(logitIdx[i]));
      if (logits == nullptr) return fail();
      active[i] = spec::GreedyStep(logits, vocab_, maxLen[i], &r.spec.draft);
      if (!active[i]) continue;
      Sequence &s = seqs_[static_cast<size_t>(r.Seq()->Id())];
      logitIdx[i] = static_cast<size_t>(batch_.n_tokens);
      Add(s, r.spec.draft.back(), s.Size(), true);
    }
    if (batch_.n_tokens == 0) break;
    if (!Decode()) return fail();
    for (int32_t k = 0; k < batch_.n_tokens; k++) {
      Sequence &s = seqs_[static_cast<size_t>(batch_.seq_id[k][0])];
      s.Append(&batch_.token[k], 1);
    }
  }
}

}  // namespace llamux
