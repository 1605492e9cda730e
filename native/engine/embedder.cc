#include "engine/embedder.h"

#include "kv/sequence.h"

#include <algorithm>
#include <cstdlib>

#include "engine/batch.h"
#include "engine/request_state.h"

namespace llamux {

namespace {
constexpr uint32_t kMaxSeqs = 256;  // distinct sequences in one embedding batch (llama.cpp's LLAMA_MAX_SEQ)

const char *PoolingName(int32_t p) {
  switch (p) {
    case LLAMA_POOLING_TYPE_NONE: return "none";
    case LLAMA_POOLING_TYPE_MEAN: return "mean";
    case LLAMA_POOLING_TYPE_CLS: return "cls";
    case LLAMA_POOLING_TYPE_LAST: return "last";
    case LLAMA_POOLING_TYPE_RANK: return "rank";
    default: return "unknown";
  }
}
}  // namespace

Embedder::Embedder(llama_model *model, uint32_t batchSize, int32_t threads, int32_t batchThreads, ggml_abort_callback abort,
                   void *abortData, Attach attach, Attach detach, Emit emit)
    : model_(model), batchSize_(batchSize), threads_(threads), batchThreads_(batchThreads), abort_(abort), abortData_(abortData),
      attach_(std::move(attach)), detach_(std::move(detach)), emit_(std::move(emit)) {
  // Encoders with learned positions (BERT) have no row past the trained length.
  maxInput_ = batchSize_;
  if (llama_model_n_ctx_train(model_) > 0) maxInput_ = std::min(maxInput_, static_cast<uint32_t>(llama_model_n_ctx_train(model_)));
  char buf[32] = {0};
  std::string key = std::string(llama_model_meta_val_str(model_, "general.architecture", buf, sizeof buf) > 0 ? buf : "") + ".pooling_type";
  char val[32] = {0};
  modelPooling_ = llama_model_meta_val_str(model_, key.c_str(), val, sizeof val) > 0 ? std::atoi(val) : LLAMA_POOLING_TYPE_NONE;
  batch_ = llama_batch_init(static_cast<int32_t>(batchSize_), 0, 1);
}

Embedder::~Embedder() {
  for (auto &c : contexts_) {
    detach_(c.ctx);
    llama_free(c.ctx);
  }
  llama_batch_free(batch_);
}

llama_context *Embedder::ContextFor(int32_t pooling, std::string *error) {
  for (auto &c : contexts_) {
    if (c.pooling == pooling) return c.ctx;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = batchSize_;
  cp.n_batch = batchSize_;
  cp.n_ubatch = batchSize_;
  cp.n_seq_max = kMaxSeqs;
  cp.kv_unified = true;
  cp.n_threads = threads_;
  cp.n_threads_batch = batchThreads_;
  cp.embeddings = true;
  cp.pooling_type = static_cast<enum llama_pooling_type>(pooling);
  cp.no_perf = true;
  cp.abort_callback = abort_;
  cp.abort_callback_data = abortData_;
  llama_context *ctx = nullptr;
  try {
    ctx = InitContext(model_, cp);  // under the adapter lock (model/adapter.h)
  } catch (const std::exception &e) {
    *error = e.what();
    return nullptr;
  }
  if (ctx == nullptr) {
    *error = "llama.cpp could not create the embedding context";
    return nullptr;
  }
  attach_(ctx);
  contexts_.push_back({pooling, ctx});
  return ctx;
}

void Embedder::Add(std::unique_ptr<EmbedJob> job) {
  job->submit = Clock::now();
  if (job->pooling < 0 && modelPooling_ == LLAMA_POOLING_TYPE_RANK) {
    Fail(*job, ErrorCode::Unsupported, "This model is a reranker (rank pooling): use rerank(), or pass pooling 'mean', 'cls' or 'last' to embed with it");
    return;
  }
  if (job->pooling < 0) job->pooling = modelPooling_;
  if (job->pooling == LLAMA_POOLING_TYPE_NONE) {
    Fail(*job, ErrorCode::Unsupported,
         "This model declares no pooling type (it is not an embedding model): pass pooling 'mean', 'cls' or 'last' to embed with it");
    return;
  }
  if (job->pooling == LLAMA_POOLING_TYPE_RANK && modelPooling_ != LLAMA_POOLING_TYPE_RANK) {
    Fail(*job, ErrorCode::Unsupported, "This model is not a reranker (its pooling type is " + std::string(PoolingName(modelPooling_)) + ", not rank)");
    return;
  }
  if (job->pooling < LLAMA_POOLING_TYPE_MEAN || job->pooling > LLAMA_POOLING_TYPE_RANK) {
    Fail(*job, ErrorCode::InvalidArgument, "Unknown pooling type " + std::to_string(job->pooling));
    return;
  }
  for (size_t i = 0; i < job->inputs.size(); i++) {
    size_t n = job->inputs[i].size();
    if (n == 0) {
      Fail(*job, ErrorCode::InvalidArgument, "Input " + std::to_string(i) + " is empty: it produced no tokens");
      return;
    }
    if (n > maxInput_) {
      Fail(*job, ErrorCode::ContextOverflow, "Input " + std::to_string(i) + " has " + std::to_string(n) + " tokens; at most " +
                                                 std::to_string(maxInput_) + " fit one embedding (the context's batchSize" +
                                                 (maxInput_ < batchSize_ ? ", and the model's trained positions)" : ")"));
      return;
    }
  }
  if (job->inputs.empty()) {
    Done(*job);
    return;
  }
  jobs_.push_back(std::move(job));
}

void Embedder::Cancel(uint64_t id) {
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if ((*it)->id != id) continue;
    Fail(**it, ErrorCode::Aborted, "The request was aborted");
    jobs_.erase(it);
    return;
  }
}

void Embedder::FailAll(ErrorCode code, const std::string &message) {
  for (auto &j : jobs_) Fail(*j, code, message);
  jobs_.clear();
}

void Embedder::Fail(EmbedJob &job, ErrorCode code, const std::string &message) {
  Event ev;
  ev.type = EventType::Embedded;
  ev.id = job.id;
  ev.code = ErrorCodeName(code);
  ev.message = message;
  emit_(std::move(ev));
}

void Embedder::Done(EmbedJob &job) {
  Event ev;
  ev.type = EventType::Embedded;
  ev.id = job.id;
  ev.index = job.dims;
  ev.floats = std::move(job.out);
  ev.stats.promptTokens = job.tokens;
  ev.stats.prefillMs = MsBetween(job.submit, Clock::now());
  emit_(std::move(ev));
}

void Embedder::OnGenerationTick(double ms) {
  creditMs_ = std::min(creditMs_ + kShare * ms, 1000.0);
}

void Embedder::Step(uint32_t maxTokens, bool decoding) {
  if (!decoding) creditMs_ = 0;  // alone, embeddings owe nothing
  if (jobs_.empty() || (decoding && creditMs_ < 0)) return;
  const Clock::time_point t0 = Clock::now();
  struct Spend {
    Embedder *e;
    bool on;
    Clock::time_point t0;
    ~Spend() {
      if (on) e->creditMs_ -= MsBetween(t0, Clock::now());
    }
  } spend{this, decoding, t0};
  const uint32_t budget = std::max<uint32_t>(1, std::min(maxTokens, batchSize_));
  const int32_t pooling = jobs_.front()->pooling;
  std::string error;
  llama_context *ctx = ContextFor(pooling, &error);
  if (ctx == nullptr) {
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if ((*it)->pooling != pooling) {
        ++it;
        continue;
      }
      Fail(**it, ErrorCode::ContextCreateFailed, error);
      it = jobs_.erase(it);
    }
    return;
  }
  // Fill the batch: inputs of jobs with this pooling, in order, while they fit.
  struct Slot {
    EmbedJob *job;
  };
  std::vector<Slot> slots;
  batch_.n_tokens = 0;
  for (auto &jp : jobs_) {
    EmbedJob &j = *jp;
    if (j.pooling != pooling) continue;
    bool full = false;
    for (size_t idx = j.next; idx < j.inputs.size(); idx++) {
      const auto &in = j.inputs[idx];
      if (slots.size() >= kMaxSeqs || (!slots.empty() && batch_.n_tokens + in.size() > budget)) {
        full = true;
        break;
      }
      const llama_seq_id seq = static_cast<llama_seq_id>(slots.size());
      // pooled embeddings need every token's output
      for (size_t k = 0; k < in.size(); k++) PushRow(batch_, in[k], static_cast<llama_pos>(k), seq, true);
      slots.push_back({&j});  // a job's inputs take consecutive slots, in order
    }
    if (full) break;
  }
  if (slots.empty()) return;  // cannot happen: every input fits an empty batch (checked in Add)
  int32_t ret = GuardedDecode(ctx, batch_);
  Sequence::ClearCells(ctx);
  std::vector<EmbedJob *> members;
  for (auto &s : slots) {
    if (std::find(members.begin(), members.end(), s.job) == members.end()) members.push_back(s.job);
  }
  if (ret != 0) {
    ErrorCode code = ret == 2 ? ErrorCode::Disposed : ErrorCode::DecodeFailed;
    std::string msg = ret == 2 ? "The context was disposed while embedding" : "llama_decode failed with code " + std::to_string(ret) + " while embedding";
    for (EmbedJob *j : members) Fail(*j, code, msg);
    jobs_.erase(std::remove_if(jobs_.begin(), jobs_.end(), [&](const std::unique_ptr<EmbedJob> &j) {
                  return std::find(members.begin(), members.end(), j.get()) != members.end();
                }),
                jobs_.end());
    return;
  }
  const int32_t dims = pooling == LLAMA_POOLING_TYPE_RANK ? static_cast<int32_t>(llama_model_n_cls_out(model_)) : llama_model_n_embd_out(model_);
  for (size_t s = 0; s < slots.size(); s++) {
    EmbedJob &j = *slots[s].job;
    const float *v = llama_get_embeddings_seq(ctx, static_cast<llama_seq_id>(s));
    if (v == nullptr) {
      Fail(j, ErrorCode::DecodeFailed, "llama.cpp returned no pooled embedding");
      j.next = j.inputs.size() + 1;  // marks it failed
      continue;
    }
    if (j.next > j.inputs.size()) continue;
    j.dims = dims;
    j.out.insert(j.out.end(), v, v + dims);
    j.tokens += static_cast<int32_t>(j.inputs[j.next].size());
    j.next++;
  }
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    EmbedJob &j = **it;
    if (j.next > j.inputs.size()) {
      it = jobs_.erase(it);
    } else if (j.next == j.inputs.size()) {
      Done(j);
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace llamux
