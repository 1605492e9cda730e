// Embedder: embedding and rerank jobs on a context's engine thread. Plain C++ (no Node-API).
// Each job is a list of token sequences (JS tokenizes); the engine thread runs one embedding
// batch per tick after the generation decode, so generation keeps going while jobs run.
// Embeddings need outputs for every token and a pooling step, which a generation context
// does not compute: each pooling type gets its own llama_context (embeddings on, n_ubatch ==
// n_batch so a sequence is never split across micro-batches, whose pooled outputs would
// overwrite each other), created on first use, sharing the engine's CPU thread pools.
// A decoder's KV cells are cleared after each batch (Sequence::ClearCells: no sequence of the
// generation context is touched; those stay with Sequence).
#pragma once
#include <llama.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"

namespace llamux {

// One embed or rerank call: every input is one sequence, pooled to one vector (rank pooling:
// one score per input).
struct EmbedJob {
  uint64_t id = 0;
  int32_t pooling = -1;  // llama_pooling_type; -1: the model's
  std::vector<std::vector<llama_token>> inputs;
  // engine thread
  size_t next = 0;  // inputs before this one are in `out`
  std::vector<float> out;
  int32_t dims = 0;
  int32_t tokens = 0;
  Clock::time_point submit;
};

class Embedder {
 public:
  using Emit = std::function<void(Event &&)>;
  using Attach = std::function<void(llama_context *)>;
  Embedder(llama_model *model, uint32_t batchSize, int32_t threads, int32_t batchThreads, ggml_abort_callback abort, void *abortData,
           Attach attach, Attach detach, Emit emit);
  ~Embedder();
  Embedder(const Embedder &) = delete;
  Embedder &operator=(const Embedder &) = delete;

  // Checks a job (sizes, pooling) and queues it; a bad job ends at once with an Embedded
  // event carrying the error.
  void Add(std::unique_ptr<EmbedJob> job);
  void Cancel(uint64_t id);
  bool Pending() const { return !jobs_.empty(); }
  // Runs one embedding batch: the oldest job's pooling, inputs in order while they fit
  // `maxTokens` (at least one input, whatever its size). While requests decode (`decoding`),
  // embeddings yield: a batch runs only with time credit, which each generation tick earns
  // (kShare of its duration) and each embedding batch spends, so generation keeps about
  // 1 / (1 + kShare) of its speed on hardware both compete for.
  void Step(uint32_t maxTokens, bool decoding);
  void OnGenerationTick(double ms);
  static constexpr double kShare = 0.25;
  // Ends every queued job with DISPOSED.
  void FailAll(ErrorCode code, const std::string &message);

 private:
  struct PoolingContext {
    int32_t pooling = 0;
    llama_context *ctx = nullptr;
  };
  llama_context *ContextFor(int32_t pooling, std::string *error);
  void Fail(EmbedJob &job, ErrorCode code, const std::string &message);
  void Done(EmbedJob &job);

  llama_model *model_;
  uint32_t batchSize_;
  uint32_t maxInput_;  // longest input: the batch, and the trained positions of encoders
  int32_t threads_, batchThreads_;
  ggml_abort_callback abort_;
  void *abortData_;
  Attach attach_, detach_;
  Emit emit_;
  int32_t modelPooling_ = -1;
  std::vector<PoolingContext> contexts_;
  std::deque<std::unique_ptr<EmbedJob>> jobs_;
  llama_batch batch_{};
  double creditMs_ = 0;  // may go negative: a long batch is paid back by later ticks
};

}  // namespace llamux
