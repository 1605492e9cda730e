#include "engine/thread_pools.h"

#include <ggml-backend.h>

namespace llamux {

namespace {
using NewFn = ggml_threadpool_t (*)(ggml_threadpool_params *);
using PoolFn = void (*)(ggml_threadpool_t);  // ggml_threadpool_free, ggml_threadpool_pause
using DeterministicFn = void (*)(ggml_threadpool_t, bool);
}  // namespace

bool ThreadPools::Attach(llama_context *ctx, int threads, int batchThreads, bool deterministic, std::string *error) {
  // The CPU backend may be a library loaded at run time: reach its functions through the registry.
  ggml_backend_reg_t cpu = ggml_backend_reg_by_name("CPU");
  auto newFn = cpu ? reinterpret_cast<NewFn>(ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_new")) : nullptr;
  free_ = cpu ? reinterpret_cast<PoolFn>(ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_free")) : nullptr;
  pause_ = cpu ? reinterpret_cast<PoolFn>(ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_pause")) : nullptr;
  if (newFn == nullptr || free_ == nullptr) {
    *error = "the CPU backend has no thread pools";
    return false;
  }
  ggml_threadpool_params p = ggml_threadpool_params_default(threads);
  decode_ = newFn(&p);
  if (decode_ == nullptr) {
    *error = "could not start the CPU thread pool";
    return false;
  }
  if (batchThreads != threads) {
    ggml_threadpool_params pb = ggml_threadpool_params_default(batchThreads);
    pb.paused = true;  // llama.cpp resumes the pool it computes with
    batch_ = newFn(&pb);
  }
  if (deterministic) {
    auto det = reinterpret_cast<DeterministicFn>(ggml_backend_reg_get_proc_address(cpu, "llamux_threadpool_set_deterministic"));
    if (det == nullptr) {
      *error = "this CPU backend has no deterministic mode (built without llamux's det-threadpool patch)";
      return false;
    }
    det(decode_, true);
    if (batch_ != nullptr) det(batch_, true);
  }
  llama_attach_threadpool(ctx, decode_, batch_);
  return true;
}

void ThreadPools::Pause() {
  if (pause_ == nullptr) return;
  if (decode_ != nullptr) pause_(decode_);
  if (batch_ != nullptr) pause_(batch_);
}

void ThreadPools::Detach(llama_context *ctx) {
  if (ctx != nullptr && decode_ != nullptr) llama_detach_threadpool(ctx);
}

ThreadPools::~ThreadPools() {
  if (free_ == nullptr) return;
  if (batch_ != nullptr) free_(batch_);
  if (decode_ != nullptr) free_(decode_);
}

}  // namespace llamux
