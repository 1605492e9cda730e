// Drafts from the model's own multi-token-prediction block (speculative mode "mtp"): GLM-4.5+,
// DeepSeek-V3, MiMo, Step-3.5 ... ship one or more NextN blocks after the trunk, trained to
// predict the token after next from the trunk's last hidden state h and the next token.
//
// llama.cpp runs the block as a second llama_context of type MTP on the same weights, with its
// own KV (the block attends over its earlier positions). Its input at position p is the token at
// p and the trunk's h of position p-1. So the block's KV must follow every committed token of a
// sequence: after each target decode, Committed takes the trunk's h rows (the target context
// outputs them for every row) of what each speculating request committed, and the rows join the
// block's KV in the next Draft (or sooner, in chunks, during a long prefill). Draft then decodes
// the pending token with the h of the last committed one, and steps greedily on the block's own
// h output: one llama_decode per draft token, every drafting request together.
//
// Exactness does not depend on any of this: drafts are verified by the target. Where the block's
// KV cannot follow (a prefix restored from a cache tier, a sequence reused by another request),
// it restarts at the first position it sees: drafts may be worse, never wrong.
// Plain C++, engine thread only.
#pragma once
#include "speculative/drafter.h"
#include <llama.h>

#include <cstdint>
#include <string>
#include <vector>

namespace llamux {

struct Request;
class ThreadPools;

class MtpDraft : public BatchedDrafter {
 public:
  MtpDraft() = default;
  ~MtpDraft();
  MtpDraft(const MtpDraft &) = delete;
  MtpDraft &operator=(const MtpDraft &) = delete;

  // An MTP context on `model` beside `target` (which is switched to output the trunk's h for
  // every row), sharing its thread pools. False with `error` set when llama.cpp refuses.
  bool Start(llama_model *model, llama_context *target, uint32_t contextSize, uint32_t sequences, ThreadPools *pools,
             std::string *error);

  // After a successful target decode of `batch` and the members' verification: records the rows
  // each speculating member committed (positions from its first row in the batch to its nPast).
  void Committed(const llama_batch &batch, const std::vector<Request *> &members) override;

  // Fills each request's spec.draft with up to maxLen[i] greedy tokens of the MTP block. On a
  // failed decode every draft is left empty and the block's KV is dropped.
  void Draft(const std::vector<Request *> &reqs, const std::vector<size_t> &maxLen) override;

  // Relative cost of one draft step against a plain decode step, estimated from the model's
  // shapes: the block and the output head against the trunk and the head.
  double StepCost() const override { return stepCost_; }

 private:
  // What the block's KV holds for one sequence id.
  struct Mirror {
    uint64_t owner = 0;             // the request it last followed
    std::vector<llama_token> toks;  // the sequence's tokens below `end`
    int32_t start = 0;              // first position in the block's KV
    int32_t end = 0;                // positions [start, end) hold committed tokens
    int32_t kvEnd = 0;              // beyond end: cells of the last drafts (dropped before use)
    std::vector<llama_token> bufTok;  // committed tokens at end, end+1 ... not decoded yet
    std::vector<float> bufH;          // the h paired with each (the trunk's, one position earlier)
    std::vector<float> lastH;         // the trunk's h at position lastPos (-1: none)
    int32_t lastPos = -1;
  };

  // Keeps what the mirror shares with the request's tokens below `keep`; a mirror that then
  // covers less than `need` positions restarts at `need` (positions must stay consecutive).
  void Sync(Mirror &m, const Request &r, int32_t keep, int32_t need);
  const float *HBefore(const Mirror &m, int32_t pos) const;
  void Restart(Mirror &m, const Request &r, int32_t at);
  void DropDrafts(Mirror &m, int32_t seq);
  void AddRow(llama_token tok, int32_t pos, int32_t seq, const float *h, bool logits);
  bool Decode();
  bool FlushBuffers(size_t minRows);
  void Fail();

  llama_context *ctx_ = nullptr;
  llama_context *target_ = nullptr;
  ThreadPools *pools_ = nullptr;
  const llama_vocab *vocab_ = nullptr;
  llama_batch batch_{};
  int32_t capacity_ = 0;
  int32_t nEmbd_ = 0;
  double stepCost_ = 1.0;
  bool partialMemory_ = false;  // the target's memory is recurrent/hybrid (batches split by sequence)
  std::vector<Mirror> mirrors_;
  std::vector<float> zeros_;
};

}  // namespace llamux
