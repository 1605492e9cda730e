// Drafts from a second, smaller model (speculative mode "draft"): its own llama_context on the
// engine thread, one Sequence per target sequence (same seq id) mirroring the request's tokens.
// Each tick: every drafting request's draft sequence is brought to its tokens (the longest
// common prefix kept, the rest prefilled), then greedy steps for all of them together, one
// llama_batch per step. Greedy drafts are deterministic, so Speculation::Verify's rule stays exact.
// Plain C++, engine thread only.
#pragma once
#include "speculative/drafter.h"
#include <llama.h>

#include <memory>
#include <string>
#include <vector>

#include "kv/sequence.h"

namespace llamux {

struct Request;

class DraftModel : public BatchedDrafter {
 public:
  DraftModel() = default;
  ~DraftModel();
  DraftModel(const DraftModel &) = delete;
  DraftModel &operator=(const DraftModel &) = delete;

  // A context on `model` for `sequences` sequences of up to `contextSize` tokens in all.
  // False with `error` set when it cannot be created or the vocabularies differ.
  bool Start(llama_model *model, const llama_model *target, uint32_t contextSize, uint32_t sequences, int32_t threads,
             std::string *error);

  // Fills each request's spec.draft with up to maxLen[i] greedy tokens of the draft model.
  // On a failed decode every draft is left empty and the draft KV is dropped.
  void Draft(const std::vector<Request *> &reqs, const std::vector<size_t> &maxLen) override;

 private:
  bool Decode();
  void Add(Sequence &s, llama_token tok, size_t pos, bool logits);

  llama_context *ctx_ = nullptr;
  const llama_vocab *vocab_ = nullptr;
  std::vector<Sequence> seqs_;
  llama_batch batch_{};
  int32_t capacity_ = 0;
};

}  // namespace llamux
