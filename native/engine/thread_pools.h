// Persistent ggml CPU thread pools for one llama context. Without them (and without OpenMP)
// ggml creates and joins its worker threads for every graph it computes: on a busy 2-core
// machine each new thread waited a scheduler slice and single-sequence decode on a small
// model fell from ~2,600 to as low as 40 tokens/s.
#pragma once
#include <ggml.h>
#include <llama.h>

#include <string>

namespace llamux {

class ThreadPools {
 public:
  ThreadPools() = default;
  ThreadPools(const ThreadPools &) = delete;
  ThreadPools &operator=(const ThreadPools &) = delete;
  ~ThreadPools();

  // Creates pools of `threads` (decode) and `batchThreads` (prompt) workers and attaches them.
  // Returns false with `error` set when the CPU backend offers no thread pools; the context
  // then keeps llama.cpp's default (per-graph threads).
  // deterministic: both pools compute with ggml's reference kernels (issue 26, the det-* patches
  // in scripts/llama-patches.mjs); false when the CPU backend lacks them.
  bool Attach(llama_context *ctx, int threads, int batchThreads, bool deterministic, std::string *error);
  // Attaches the same pools to another context computed on the same thread (the embedder's).
  void Share(llama_context *ctx) {
    if (decode_ != nullptr) llama_attach_threadpool(ctx, decode_, batch_);
  }
  // Puts the workers to sleep now instead of after their polling spell: called when the engine
  // goes idle, so that an idle context's workers take no core from another context's compute
  // (ggml resumes a paused pool when it computes the next graph). No-op without the patch.
  void Pause();
  // The pool another graph computed on this thread should use (the projector's encode): the
  // prompt pool when there is one. nullptr when none is attached.
  ggml_threadpool_t ForBatches() const { return batch_ != nullptr ? batch_ : decode_; }
  // Detach before the context is freed, free after.
  void Detach(llama_context *ctx);

 private:
  ggml_threadpool_t decode_ = nullptr;
  ggml_threadpool_t batch_ = nullptr;
  void (*free_)(ggml_threadpool_t) = nullptr;
  void (*pause_)(ggml_threadpool_t) = nullptr;
};

}  // namespace llamux
