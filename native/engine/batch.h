// One tick's llama_batch: building it from the active requests, decoding it, and recovering
// when a decode is aborted (keep what was computed) or finds no room in the KV cache (free
// the KV of idle sequences). Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <memory>
#include <vector>

#include "engine/adapter_turns.h"
#include "engine/request_state.h"

namespace llamux {

// Appends one token of one sequence to a llama_batch that has room for it; returns its row.
inline int32_t PushRow(llama_batch &b, llama_token tok, llama_pos pos, llama_seq_id seq, bool logits) {
  int32_t k = b.n_tokens++;
  b.token[k] = tok;
  b.pos[k] = pos;
  b.n_seq_id[k] = 1;
  b.seq_id[k][0] = seq;
  b.logits[k] = logits ? 1 : 0;
  return k;
}

// llama_decode, with a C++ exception thrown inside llama.cpp reported as -100 (never past the
// engine thread).
int32_t GuardedDecode(llama_context *ctx, const llama_batch &b);

class Batch {
 public:
  Batch(llama_context *ctx, uint32_t capacity, uint32_t tickBudget, uint32_t sequenceContextSize);
  ~Batch();
  Batch(const Batch &) = delete;
  Batch &operator=(const Batch &) = delete;

  // One token for every decoding request first (decoding never waits behind a prompt),
  // then prompt chunks, oldest first, under the per-tick budget. False when empty. Only the
  // requests of one LoRA adapter set take part (AdapterTurns: the others wait a tick).
  bool Build(const std::vector<std::unique_ptr<Request>> &active);
  const std::vector<Request *> &Members() const { return members_; }
  // The llama_batch last decoded (its positions; the MTP drafter pairs rows with them).
  const llama_batch &Raw() const { return batch_; }
  // Whether this tick's batch carries drafts (speculative decoding).
  bool HasDrafts() const { return drafts_; }

  // llama_decode with the tick's adapter set applied: 0 ok, 1 no room in the KV cache,
  // 2 aborted, other values failed (-100: llama.cpp threw, -101: it refused the adapters).
  int32_t Decode();

  // After a successful decode: every member's fed tokens are in its sequence's KV.
  void Commit();
  // After an abort: finished ubatches stay in the KV. Keeps what was computed, except a row
  // whose logits were needed (they are not kept); the rest is decoded again next tick.
  void KeepComputed();

  // After "no room": drops the KV kept by idle sequences. False when there was none.
  static bool FreeIdle(std::vector<Sequence> &sequences);

 private:
  void Add(Request &r, size_t count, bool wantLogits);
  void AddDraft(Request &r);

  llama_context *ctx_;
  llama_batch batch_{};
  int32_t capacity_;
  uint32_t tickBudget_;
  size_t nCtxSeq_;
  std::vector<Request *> members_;
  bool drafts_ = false;
  AdapterTurns turns_;
  std::string appliedKey_;  // the adapter set the context holds ("" : none, llama.cpp's start)
};

}  // namespace llamux
