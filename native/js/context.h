// Context: the JS-visible owner of one llama_context and the native thread that runs
// every decode for it. Events travel to JS in batches through one ThreadSafeFunction,
// with at most one call queued at a time.
#pragma once
#include <napi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "model/model.h"
#include "engine/scheduler.h"

namespace llamux {

class Context : public Napi::ObjectWrap<Context> {
 public:
  static Napi::Object Init(Napi::Env env, Napi::Object exports);
  // Stops and joins every engine thread of this process (JS calls it on 'exit', before
  // static destructors run under a still-decoding thread).
  static Napi::Value ShutdownAll(const Napi::CallbackInfo &info);
  explicit Context(const Napi::CallbackInfo &info);
  ~Context() override;

 private:
  Napi::Value Submit(const Napi::CallbackInfo &info);
  Napi::Value SessionCommand(const Napi::CallbackInfo &info);
  // openSession() -> number: a new session's handle (never reused by this context). The
  // engine creates its state when the first request on it is placed.
  Napi::Value OpenSession(const Napi::CallbackInfo &info);
  Napi::Value Embed(const Napi::CallbackInfo &info);
  void Enqueue(Napi::Env env, std::unique_ptr<RequestParams> p);
  Napi::Value Cancel(const Napi::CallbackInfo &info);
  Napi::Value Pause(const Napi::CallbackInfo &info);
  Napi::Value SetRef(const Napi::CallbackInfo &info);
  Napi::Value Close(const Napi::CallbackInfo &info);
  Napi::Value Stats(const Napi::CallbackInfo &info);

  // What the engine thread hands to JS. It outlives the Context when the JS object is
  // collected first (the thread-safe function may still run or finalize after that), so
  // calls into JS and the finalizer reach the Context only through `context`.
  struct Outbox {
    std::mutex mu;
    std::vector<Event> events;
    bool scheduled = false;
    bool released = false;  // the thread-safe function was released: post nothing more
    Context *context = nullptr;  // nullptr once the Context is destroyed
  };

  void ThreadMain();
  void Post(std::vector<Event> &&events);
  static void CallJs(Napi::Env env, Napi::Function fn, Outbox *box);
  static void OnFinalize(Napi::Env env, void *, Outbox *box);
  void StopAndJoin();
  // RPC models: waits up to timeoutMs for the engine thread to end; when it does not (it
  // waits on a dead RPC server forever), abandons it: detaches it, leaks the scheduler and
  // releases the thread-safe function in its place. True when the thread ended or was abandoned.
  bool JoinOrAbandon(int timeoutMs);
  static void TeardownHook(void *arg);

  std::shared_ptr<ModelHandle> model_;
  std::shared_ptr<ModelHandle> draftModel_;  // speculative mode "draft": kept alive with the context
  std::unique_ptr<Scheduler> sched_;
  std::thread thread_;
  std::shared_ptr<std::atomic<bool>> exited_ = std::make_shared<std::atomic<bool>>(false);
  uint64_t rpcListener_ = 0;
  SessionHandle nextSession_ = 1;  // JS thread only
  Napi::ThreadSafeFunction tsfn_;
  Outbox *outbox_ = nullptr;  // owned by the thread-safe function (freed in OnFinalize)
  bool closeRequested_ = false;
  bool finalized_ = false;
  bool refd_ = true;
  std::vector<Napi::Promise::Deferred> closeWaiters_;
  napi_env env_ = nullptr;
  bool hookAdded_ = false;
};

}  // namespace llamux
