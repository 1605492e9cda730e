#include "speculative/mtp_draft.h"

#include <llama-ext.h>  // llama.cpp's staging API for MTP: nextn embeddings in and out

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/batch.h"
#include "engine/request_state.h"
#include "engine/thread_pools.h"

namespace llamux {

// A long prefill joins the block's KV in chunks of this many rows per sequence, so the h rows
// waiting for it stay small (n_embd floats each).
static constexpr size_t kFlushRows = 64;

MtpDraft::~MtpDraft() {
  if (batch_.embd != nullptr) {
    std::free(batch_.token);
    batch_.token = nullptr;
    llama_batch_free(batch_);
  }
  if (ctx_ != nullptr) {
    if (pools_ != nullptr) pools_->Detach(ctx_);
    llama_free(ctx_);
  }
}

bool MtpDraft::Start(llama_model *model, llama_context *target, uint32_t contextSize, uint32_t sequences, ThreadPools *pools,
                     std::string *error) {
  target_ = target;
  vocab_ = llama_model_get_vocab(model);
  partialMemory_ = llama_model_is_recurrent(model) || llama_model_is_hybrid(model);
  llama_context_params cp = llama_context_default_params();
  cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
  cp.n_ctx = contextSize;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_seq_max = sequences;
  cp.kv_unified = true;
  cp.n_threads = llama_n_threads(target);
  cp.n_threads_batch = llama_n_threads_batch(target);
  cp.no_perf = true;
  try {
    ctx_ = InitContext(model, cp);  // under the adapter lock (model/adapter.h)
  } catch (const std::exception &) {
    ctx_ = nullptr;
  }
  if (ctx_ == nullptr) {
    *error = "llama.cpp could not create the multi-token-prediction context";
    return false;
  }
  pools_ = pools;
  if (pools_ != nullptr) pools_->Share(ctx_);  // computed on the engine thread, between target decodes
  nEmbd_ = llama_model_n_embd_out(model);
  capacity_ = static_cast<int32_t>(llama_n_batch(ctx_));
  batch_ = llama_batch_init(capacity_, nEmbd_, 1);  // allocates the h rows (embd), not the tokens
  batch_.token = static_cast<llama_token *>(std::malloc(sizeof(llama_token) * static_cast<size_t>(capacity_)));
  llama_set_embeddings_nextn(target, true, /*masked*/ false);  // h for every row of a target batch
  llama_set_embeddings_nextn(ctx_, true, /*masked*/ true);     // h of the rows with logits
  mirrors_.assign(sequences, Mirror{});
  zeros_.assign(static_cast<size_t>(nEmbd_), 0.0f);
  // Parameters per block (the output head and the token embedding aside): a draft step runs one
  // block and the head, a decode step the trunk's blocks and the head.
  const double head = static_cast<double>(nEmbd_) * llama_vocab_n_tokens(vocab_);
  const double nTrunk = std::max(1, llama_model_n_layer(model));
  const double nMtp = std::max(1, llama_model_n_layer_nextn(model));
  const double block = std::max(0.0, (static_cast<double>(llama_model_n_params(model)) - 2 * head) / (nTrunk + nMtp));
  stepCost_ = (head + block) / (head + nTrunk * block);
  return true;
}

void MtpDraft::AddRow(llama_token tok, int32_t pos, int32_t seq, const float *h, bool logits) {
  int32_t k = PushRow(batch_, tok, pos, seq, logits);
  std::memcpy(batch_.embd + static_cast<size_t>(k) * nEmbd_, h, sizeof(float) * static_cast<size_t>(nEmbd_));
}

bool MtpDraft::Decode() { return GuardedDecode(ctx_, batch_) == 0; }

void MtpDraft::Fail() {
  Sequence::ClearCells(ctx_);
  for (auto &m : mirrors_) m = Mirror{};
}

void MtpDraft::DropDrafts(Mirror &m, int32_t seq) {
  if (m.kvEnd > m.end) Sequence::DropCells(ctx_, seq, m.end);
  m.kvEnd = m.end;
}

// The block's KV starts over at position `at` (a sequence with no cells takes any position):
// the positions below are the sequence's, the block never saw them.
void MtpDraft::Restart(Mirror &m, const Request &r, int32_t at) {
  Sequence::DropCells(ctx_, r.Seq()->Id(), -1);
  m.toks.assign(r.tokens.begin(), r.tokens.begin() + at);
  m.start = m.end = m.kvEnd = at;
  m.bufTok.clear();
  m.bufH.clear();
  m.lastPos = -1;
}

void MtpDraft::Sync(Mirror &m, const Request &r, int32_t keep, int32_t need) {
  const int32_t covered = m.end + static_cast<int32_t>(m.bufTok.size());
  int32_t common = std::min(covered, keep);
  if (m.owner != r.p->id) {
    // another request on this sequence id: compare what it holds (once per request)
    int32_t c = 0;
    while (c < common) {
      llama_token t = c < m.end ? m.toks[static_cast<size_t>(c)] : m.bufTok[static_cast<size_t>(c - m.end)];
      if (t != r.tokens[static_cast<size_t>(c)]) break;
      c++;
    }
    common = c;
    m.owner = r.p->id;
  }
  if (common < m.end) {
    // the sequence was cut back (or diverged) inside what the block holds
    m.end = std::max(common, m.start);
    m.toks.resize(static_cast<size_t>(m.end));
    m.bufTok.clear();
    m.bufH.clear();
    DropDrafts(m, r.Seq()->Id());
  } else if (common < covered) {
    m.bufTok.resize(static_cast<size_t>(common - m.end));
    m.bufH.resize(m.bufTok.size() * static_cast<size_t>(nEmbd_));
  }
  if (common < m.start || common < need) Restart(m, r, need);
}

// The trunk's h one position before `pos`, when the mirror has it (zeros otherwise: the block
// then drafts from the token alone).
const float *MtpDraft::HBefore(const Mirror &m, int32_t pos) const {
  return m.lastPos == pos - 1 && !m.lastH.empty() ? m.lastH.data() : zeros_.data();
}

void MtpDraft::Committed(const llama_batch &tb, const std::vector<Request *> &members) {
  if (ctx_ == nullptr) return;
  const float *h = llama_get_embeddings_nextn(target_);
  if (h == nullptr) return;
  // A recurrent/hybrid memory splits a batch of several sequences into equal per-sequence
  // chunks, and the h rows come out in that order, not the batch's: from such a batch they are
  // not used (the block then drafts from the tokens alone until the next batch of one sequence).
  bool oneSequence = true;
  for (int32_t k = 1; k < tb.n_tokens && oneSequence; k++) oneSequence = tb.seq_id[k][0] == tb.seq_id[0][0];
  const bool trustH = !partialMemory_ || oneSequence;
  for (Request *rp : members) {
    const Request &r = *rp;
    const int32_t first = r.tick.first;
    if (r.Done() || r.Seq() == nullptr || !r.p->speculative || first < 0) continue;
    Mirror &m = mirrors_[static_cast<size_t>(r.Seq()->Id())];
    const int32_t pos0 = tb.pos[first];
    const int32_t committed = static_cast<int32_t>(r.nPast);
    if (committed <= pos0) continue;
    Sync(m, r, committed, pos0);
    // rows already in the block's KV (the pending token, decoded by the last Draft) stay
    int32_t from = m.end + static_cast<int32_t>(m.bufTok.size());
    for (int32_t q = from; q < committed; q++) {
      const float *hPrev = !trustH          ? zeros_.data()
                           : q - 1 >= pos0 ? h + static_cast<size_t>(first + q - 1 - pos0) * nEmbd_
                                           : HBefore(m, q);
      m.bufTok.push_back(r.tokens[static_cast<size_t>(q)]);
      m.bufH.insert(m.bufH.end(), hPrev, hPrev + nEmbd_);
    }
    const float *hLast = h + static_cast<size_t>(first + committed - 1 - pos0) * nEmbd_;
    m.lastH.assign(hLast, hLast + nEmbd_);
    m.lastPos = trustH ? committed - 1 : -1;
  }
  if (!FlushBuffers(kFlushRows)) Fail();
}

// Decodes the waiting rows of every mirror holding at least `minRows` (all with 0), no logits.
bool MtpDraft::FlushBuffers(size_t minRows) {
  while (true) {
    batch_.n_tokens = 0;
    for (size_t s = 0; s < mirrors_.size(); s++) {
      Mirror &m = mirrors_[s];
      if (m.bufTok.empty() || m.bufTok.size() < std::max<size_t>(minRows, 1)) continue;
      DropDrafts(m, static_cast<int32_t>(s));
      size_t n = std::min(m.bufTok.size(), static_cast<size_t>(capacity_ - batch_.n_tokens));
      for (size_t i = 0; i < n; i++) {
        AddRow(m.bufTok[i], m.end + static_cast<int32_t>(i), static_cast<int32_t>(s), m.bufH.data() + i * nEmbd_, false);
      }
      if (batch_.n_tokens >= capacity_) break;
    }
    if (batch_.n_tokens == 0) return true;
    if (!Decode()) return false;
    for (size_t s = 0; s < mirrors_.size(); s++) {
      Mirror &m = mirrors_[s];
      size_t n = 0;
      for (int32_t k = 0; k < batch_.n_tokens; k++) n += batch_.seq_id[k][0] == static_cast<int32_t>(s) ? 1 : 0;
      if (n == 0) continue;
      m.toks.insert(m.toks.end(), m.bufTok.begin(), m.bufTok.begin() + static_cast<std::ptrdiff_t>(n));
      m.bufTok.erase(m.bufTok.begin(), m.bufTok.begin() + static_cast<std::ptrdiff_t>(n));
      m.bufH.erase(m.bufH.begin(), m.bufH.begin() + static_cast<std::ptrdiff_t>(n * nEmbd_));
      m.end += static_cast<int32_t>(n);
      m.kvEnd = m.end;
    }
  }
}

void MtpDraft::Draft(const std::vector<Request *> &reqs, const std::vector<size_t> &maxLen) {
  const size_t n = reqs.size();
  if (n == 0 || ctx_ == nullptr) return;
  for (Request *r : reqs) r->spec.draft.clear();
  for (Request *rp : reqs) {
    Sync(mirrors_[static_cast<size_t>(rp->Seq()->Id())], *rp, static_cast<int32_t>(rp->nPast), static_cast<int32_t>(rp->nPast));
  }
  // The waiting rows and the pending tokens in one decode when they fit.
  size_t rows = n;
  for (Request *rp : reqs) rows += mirrors_[static_cast<size_t>(rp->Seq()->Id())].bufTok.size();
  if (rows > static_cast<size_t>(capacity_) && !FlushBuffers(0)) return Fail();
  batch_.n_tokens = 0;
  std::vector<int32_t> idx(n, -1);
  for (size_t i = 0; i < n; i++) {
    Request &r = *reqs[i];
    const int32_t seq = r.Seq()->Id();
    Mirror &m = mirrors_[static_cast<size_t>(seq)];
    DropDrafts(m, seq);
    for (size_t k = 0; k < m.bufTok.size(); k++) AddRow(m.bufTok[k], m.end + static_cast<int32_t>(k), seq, m.bufH.data() + k * nEmbd_, false);
    idx[i] = batch_.n_tokens;
    AddRow(r.tokens[r.nPast], static_cast<int32_t>(r.nPast), seq, HBefore(m, static_cast<int32_t>(r.nPast)), true);
  }
  if (!Decode()) return Fail();
  for (size_t i = 0; i < n; i++) {
    Request &r = *reqs[i];
    Mirror &m = mirrors_[static_cast<size_t>(r.Seq()->Id())];
    m.toks.insert(m.toks.end(), m.bufTok.begin(), m.bufTok.end());
    m.toks.push_back(r.tokens[r.nPast]);  // the pending token with the trunk's h: a committed row
    m.bufTok.clear();
    m.bufH.clear();
    m.end = m.kvEnd = static_cast<int32_t>(r.nPast) + 1;
  }
  // Greedy steps on the block's own h; a request stops at its length or an EOG token.
  std::vector<bool> active(n);
  for (size_t i = 0; i < n; i++) active[i] = maxLen[i] > 0;
  std::vector<std::vector<float>> hNext(n);
  while (true) {
    bool any = false;
    for (size_t i = 0; i < n; i++) {
      if (!active[i]) continue;
      const float *logits = llama_get_logits_ith(ctx_, idx[i]);
      const float *hOut = llama_get_embeddings_nextn_ith(ctx_, idx[i]);
      if (logits == nullptr || hOut == nullptr) {
        for (Request *q : reqs) q->spec.draft.clear();
        return Fail();
      }
      active[i] = spec::GreedyStep(logits, vocab_, maxLen[i], &reqs[i]->spec.draft);
      if (!active[i]) continue;
      hNext[i].assign(hOut, hOut + nEmbd_);
      any = true;
    }
    if (!any) break;
    batch_.n_tokens = 0;
    for (size_t i = 0; i < n; i++) {
      if (!active[i]) continue;
      Request &r = *reqs[i];
      Mirror &m = mirrors_[static_cast<size_t>(r.Seq()->Id())];
      idx[i] = batch_.n_tokens;
      AddRow(r.spec.draft.back(), m.kvEnd, r.Seq()->Id(), hNext[i].data(), true);
      m.kvEnd++;
    }
    if (!Decode()) {
      for (Request *r : reqs) r->spec.draft.clear();
      return Fail();
    }
  }
}

}  // namespace llamux
