// Drafter: where a speculating request's draft tokens come from. Speculation (speculation.h)
// asks each decoding request's drafter for a draft before the batch is built and tells it
// what the requests committed after the decode; the batch verifies the drafts with each
// request's own sampler, so no drafter can change the output. Three implementations:
//   NgramDrafter  the request's own tokens (ngram_drafter.h)
//   DraftModel    a smaller model (draft_model.h)
//   MtpDraft      the model's own multi-token-prediction block (mtp_draft.h)
// Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <cstddef>
#include <vector>

namespace llamux {

struct Request;

class Drafter {
 public:
  virtual ~Drafter() = default;

  // A draft of at most `maxLen` tokens into r.spec.draft: made now (returns its length), or
  // queued for Flush (returns maxLen, what it may take of the tick's budget). `longMatchOnly`:
  // the request is pausing; only a match worth a probe counts (n-gram drafts).
  virtual size_t Ask(Request &r, size_t maxLen, bool longMatchOnly) = 0;
  // Makes the queued drafts (model drafters: every asking request together).
  virtual void Flush() {}
  // After a successful decode of `batch` and the members' verification: what each one
  // committed (the MTP block follows every committed token).
  virtual void Committed(const llama_batch &batch, const std::vector<Request *> &members) {
    (void)batch;
    (void)members;
  }
  // One draft token's cost in plain decode steps, estimated from the drafter's shapes (0:
  // the mode's default).
  virtual double StepCost() const { return 0; }
};

// The queue of a drafter that drafts every asking request together.
class BatchedDrafter : public Drafter {
 public:
  size_t Ask(Request &r, size_t maxLen, bool longMatchOnly) override {
    (void)longMatchOnly;
    asked_.push_back(&r);
    lens_.push_back(maxLen);
    return maxLen;
  }
  void Flush() override {
    if (asked_.empty()) return;
    Draft(asked_, lens_);
    asked_.clear();
    lens_.clear();
  }
  // Fills each request's spec.draft with up to maxLen[i] tokens.
  virtual void Draft(const std::vector<Request *> &reqs, const std::vector<size_t> &maxLen) = 0;

 private:
  std::vector<Request *> asked_;
  std::vector<size_t> lens_;
};

}  // namespace llamux
