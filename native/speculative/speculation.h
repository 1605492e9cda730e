// Speculation: speculative decoding as one part of the engine (speculative.h has the why and
// the length policy). It owns the drafter of the context's mode (drafter.h); before each batch
// it gives every decoding request a draft (Plan), after the decode it verifies each drafted
// request's rows with that request's own sampler and output path (Verify), and it tells the
// drafter what the requests committed. Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <memory>
#include <string>
#include <vector>

#include "speculative/drafter.h"
#include "speculative/speculative.h"

namespace llamux {

class ThreadPools;
class TokenStepper;
struct CacheCounters;
struct Request;

// What the drafters need of the context they draft for.
struct SpecContext {
  llama_model *model = nullptr;
  llama_context *ctx = nullptr;
  ThreadPools *pools = nullptr;
  uint32_t contextSize = 0, sequences = 0, sequenceContextSize = 0;
  int32_t threads = 0;
  bool unifiedKv = false;
  bool canTruncate = true;  // the memory can drop a tail
  uint32_t rollback = 0;    // recurrent/hybrid memory: draft tokens llama.cpp can roll back (n_rs_seq)
  bool swaLimited = false;  // a window-only sliding-window cache
  CacheCounters *counters = nullptr;
};

class Speculation {
 public:
  explicit Speculation(const SpecConfig &cfg) : cfg_(cfg) {}
  ~Speculation();
  Speculation(const Speculation &) = delete;
  Speculation &operator=(const Speculation &) = delete;

  // Starts the mode's drafter when the memory can drop rejected drafts (else it stays off and
  // OffReason says why). False with `error` set when the drafter cannot start.
  bool Start(const SpecContext &c, std::string *error);
  // Frees the drafter (its context shares the target's pools: before they are detached).
  void Stop() { drafter_.reset(); }

  bool On() const { return on_; }
  const char *ModeName() const { return on_ ? SpecModeName(cfg_.mode) : "off"; }
  const std::string &OffReason() const { return off_; }

  // Before the batch is built: each decoding request's draft (r.spec.draft), or none.
  void Plan(const std::vector<std::unique_ptr<Request>> &active);
  // After a successful decode: walks r's draft rows, keeps what its own sampler agrees with.
  void Verify(Request &r, TokenStepper &steps);
  // After every member is verified: the drafter follows what they committed.
  void Committed(const llama_batch &batch, const std::vector<Request *> &members);
  // llama.cpp found no room for a batch with drafts: the next tick drafts nothing.
  void NoRoomForDrafts() { noDraftTick_ = true; }

 private:
  SpecConfig cfg_;
  SpecContext c_;
  std::unique_ptr<Drafter> drafter_;
  bool on_ = false;          // the context speculates (mode set and the memory can drop drafts)
  std::string off_;          // why it does not, when the mode asked for it
  bool noDraftTick_ = false; // the last batch found no room with drafts: one tick without
  SpecEvidence evidence_;    // how the context's drafts fared (a new request's first estimate)
  std::vector<Request *> asked_;
};

}  // namespace llamux
