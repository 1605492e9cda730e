#include "js/context.h"

#include <chrono>
#include <cmath>
#include <set>

#include "engine/errors.h"
#include "js/events_js.h"
#include "js/napi_util.h"
#include "js/request_js.h"
#include "media/media_js.h"

namespace llamux {

namespace {
std::mutex g_contexts_mu;
std::set<Context *> g_contexts;

const napi_type_tag kContextTag = {0x6c6c616d7578456eULL, 0x67696e6554616731ULL};

}  // namespace

Napi::Object Context::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function ctor = DefineClass(env, "Context", {
      InstanceMethod<&Context::Submit>("submit"),
      InstanceMethod<&Context::SessionCommand>("sessionCommand"),
      InstanceMethod<&Context::OpenSession>("openSession"),
      InstanceMethod<&Context::Embed>("embed"),
      InstanceMethod<&Context::Cancel>("cancel"),
      InstanceMethod<&Context::Pause>("pause"),
      InstanceMethod<&Context::SetRef>("setRef"),
      InstanceMethod<&Context::Close>("close"),
      InstanceMethod<&Context::Stats>("stats"),
  });
  exports.Set("Context", ctor);
  exports.Set("shutdownAll", Napi::Function::New(env, &Context::ShutdownAll, "shutdownAll"));
  return exports;
}

Napi::Value Context::ShutdownAll(const Napi::CallbackInfo &info) {
  std::vector<Context *> all;
  {
    // Only this environment's contexts: a worker thread exiting leaves the others running.
    std::lock_guard<std::mutex> lk(g_contexts_mu);
    for (Context *e : g_contexts) {
      if (e->env_ == static_cast<napi_env>(info.Env())) all.push_back(e);
    }
  }
  for (Context *e : all) e->StopAndJoin();
  return info.Env().Undefined();
}

// new Context(model, options, onEvents)
Context::Context(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Context>(info) {
  Napi::Env env = info.Env();
  Model *model = info.Length() > 0 ? Model::Unwrap(info[0]) : nullptr;
  if (model == nullptr) throw Napi::TypeError::New(env, "Expected argument 0 (model) to be a Model");
  LLAMUX_REQUIRE_OBJECT(info, 1, "options");
  LLAMUX_REQUIRE_FUNCTION(info, 2, "onEvents");
  model_ = model->Handle(env);
  Napi::Object o = info[1].As<Napi::Object>();
  // Every key is required: src/native/request.ts (contextConfig) sends them all.
  ContextConfig cfg;
  cfg.contextSize = static_cast<uint32_t>(RequireInt(env, o, "contextSize"));
  cfg.batchSize = static_cast<uint32_t>(RequireInt(env, o, "batchSize"));
  cfg.microBatchSize = static_cast<uint32_t>(RequireInt(env, o, "microBatchSize"));
  cfg.sequences = static_cast<uint32_t>(RequireInt(env, o, "sequences"));
  cfg.threads = static_cast<int32_t>(RequireInt(env, o, "threads"));
  cfg.batchThreads = static_cast<int32_t>(RequireInt(env, o, "batchThreads"));
  cfg.unifiedKv = RequireBool(env, o, "unifiedKv");
  cfg.swaFull = RequireBool(env, o, "swaFull");
  cfg.flashAttention = static_cast<int32_t>(RequireInt(env, o, "flashAttention"));
  cfg.kvTypeK = static_cast<int32_t>(RequireInt(env, o, "kvTypeK"));
  cfg.kvTypeV = static_cast<int32_t>(RequireInt(env, o, "kvTypeV"));
  cfg.maxQueued = static_cast<uint32_t>(RequireInt(env, o, "maxQueued"));
  cfg.prefillChunk = static_cast<uint32_t>(RequireInt(env, o, "prefillChunk"));
  cfg.cacheRamBytes = static_cast<size_t>(RequireNumber(env, o, "cacheRamBytes"));
  cfg.sessionTtlMs = static_cast<uint32_t>(RequireNumber(env, o, "sessionTtlMs"));
  cfg.idleKvSpillMs = static_cast<uint32_t>(RequireNumber(env, o, "idleKvSpillMs"));
  cfg.cacheDir = RequireString(env, o, "cacheDir");
  cfg.diskWriteThrough = RequireBool(env, o, "diskWriteThrough");
  cfg.cacheDiskBytes = static_cast<uint64_t>(RequireNumber(env, o, "cacheDiskBytes"));
  cfg.modelFingerprint = model_->fingerprint;
  cfg.prefixCache = RequireBool(env, o, "prefixCache");
  cfg.deterministic = RequireBool(env, o, "deterministic");
  cfg.checkpoints = static_cast<uint32_t>(RequireInt(env, o, "kvCheckpoints"));
  cfg.rpc = model_->rpc;
  cfg.projector = model_->projector;
  {
    std::string mode = RequireString(env, o, "speculative");
    if (mode != "off" && mode != "ngram" && mode != "draft" && mode != "mtp") {
      throw Napi::RangeError::New(env, "speculative must be \"off\", \"ngram\", \"draft\" or \"mtp\"");
    }
    cfg.spec.mode = mode == "ngram" ? SpecMode::Ngram : mode == "draft" ? SpecMode::Draft : mode == "mtp" ? SpecMode::Mtp : SpecMode::Off;
    if (cfg.spec.mode == SpecMode::Mtp && !model_->mtpLoaded) {
      ThrowCoded(env, ErrorCode::InvalidArgument, llama_model_n_layer_nextn(model_->model) > 0
                                      ? "speculative \"mtp\" needs the model's MTP blocks: load it with { mtp: true }"
                                      : "speculative \"mtp\": this model has no multi-token-prediction (NextN) blocks");
    }
    Napi::Value dm = o.Get("draftModel");
    if (!dm.IsNull()) {
      Model *draft = Model::Unwrap(dm);
      if (draft == nullptr) throw Napi::TypeError::New(env, "draftModel must be a Model or null");
      draftModel_ = draft->Handle(env);
      cfg.spec.draftModel = draftModel_->model;
    }
    if (cfg.spec.mode == SpecMode::Draft && cfg.spec.draftModel == nullptr) throw Napi::TypeError::New(env, "speculative \"draft\" needs draftModel");
    cfg.spec.draftMax = static_cast<uint32_t>(RequireInt(env, o, "specDraftMax"));
    cfg.spec.ngramMin = static_cast<uint32_t>(RequireInt(env, o, "specNgramMin"));
    cfg.spec.ngramMax = static_cast<uint32_t>(RequireInt(env, o, "specNgramMax"));
    cfg.spec.maxSequences = static_cast<uint32_t>(RequireInt(env, o, "specMaxSequences"));
    cfg.spec.tickBudget = static_cast<uint32_t>(RequireInt(env, o, "specTickBudget"));
    cfg.spec.draftCost = RequireNumber(env, o, "specDraftCost");
    if (cfg.spec.ngramMin < 1 || cfg.spec.ngramMax < cfg.spec.ngramMin) throw Napi::RangeError::New(env, "specNgramMin must be >= 1 and <= specNgramMax");
  }
  ReadVocabTokens(env, o, "markerStart", model_->n_vocab, &cfg.markers.start);
  ReadVocabTokens(env, o, "markerEnd", model_->n_vocab, &cfg.markers.end);
  ReadVocabTokens(env, o, "markerPayloadStart", model_->n_vocab, &cfg.markers.payloadStart);
  ReadVocabTokens(env, o, "markerPayloadEnd", model_->n_vocab, &cfg.markers.payloadEnd);
  if (cfg.sequences < 1 || cfg.sequences > 256) throw Napi::RangeError::New(env, "sequences must be in 1..256");
  if (cfg.batchSize < 1 || cfg.contextSize < 1) throw Napi::RangeError::New(env, "contextSize and batchSize must be positive");

  info.This().As<Napi::Object>().TypeTag(&kContextTag);
  outbox_ = new Outbox();
  outbox_->context = this;
  tsfn_ = Napi::ThreadSafeFunction::New(env, info[2].As<Napi::Function>(), "llamux.context", 0, 1, outbox_,
                                        &Context::OnFinalize, static_cast<void *>(nullptr));
  sched_ = std::make_unique<Scheduler>(model_->model, cfg, [this](std::vector<Event> &&evs) { Post(std::move(evs)); });
  // No Ref(): the JS object holds no strong reference to itself, so a dropped, idle
  // context is collected (context.ts keeps a busy one reachable). ~Context stops the thread.
  env_ = env;
  napi_add_env_cleanup_hook(env, &Context::TeardownHook, this);
  hookAdded_ = true;
  {
    std::lock_guard<std::mutex> lk(g_contexts_mu);
    g_contexts.insert(this);
  }
  thread_ = std::thread([this, exited = exited_] {
    ThreadMain();
    exited->store(true);
  });
  if (model_->rpc) {
    // Runs on the RPC monitor thread when a server of the model dies; ~Context removes it
    // (waiting for a running call) before anything it touches goes away.
    rpcListener_ = model_->rpc->AddListener([this](const std::string &why) {
      Event ev;
      ev.type = EventType::RpcFailed;
      ev.code = ErrorCodeName(ErrorCode::RpcUnavailable);
      ev.message = why;
      Post({std::move(ev)});
    });
  }
}

Context::~Context() {
  {
    std::lock_guard<std::mutex> lk(g_contexts_mu);
    g_contexts.erase(this);
  }
  if (model_ && model_->rpc) model_->rpc->RemoveListener(rpcListener_);
  StopAndJoin();  // the thread has released the thread-safe function when this returns
  if (hookAdded_) {
    napi_remove_env_cleanup_hook(env_, &Context::TeardownHook, this);
    hookAdded_ = false;
  }
  if (outbox_ != nullptr) {
    std::lock_guard<std::mutex> lk(outbox_->mu);
    outbox_->context = nullptr;  // calls still queued and the finalizer find no Context
  }
}

void Context::TeardownHook(void *arg) {
  auto *self = static_cast<Context *>(arg);
  self->hookAdded_ = false;
  self->StopAndJoin();
}

void Context::StopAndJoin() {
  if (sched_) sched_->Close();
  if (!thread_.joinable() || thread_.get_id() == std::this_thread::get_id()) return;
  if (model_ && model_->rpc && JoinOrAbandon(30000)) return;
  thread_.join();
}

bool Context::JoinOrAbandon(int timeoutMs) {
  if (!thread_.joinable()) return true;
  // Until the thread ends, or the group is dead (then a short grace: an idle thread leaves at
  // once), or timeoutMs (a server that neither answers nor fails: the group is failed).
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto deadline = now() + std::chrono::milliseconds(timeoutMs);
  bool graced = false;
  while (!exited_->load()) {
    if (model_->rpc->IsDead() && !graced) {
      graced = true;
      deadline = std::min(deadline, now() + std::chrono::milliseconds(200));
    }
    if (now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (exited_->load()) {
    thread_.join();
    return true;
  }
  rpc::Fail(model_->rpc, "an RPC server did not answer within " + std::to_string(timeoutMs / 1000) + " s");
  // Stuck on a dead RPC server: it never returns, so nothing it uses may be freed.
  thread_.detach();
  (void)sched_.release();
  bool release = false;
  if (outbox_ != nullptr) {
    std::lock_guard<std::mutex> lk(outbox_->mu);
    release = !outbox_->released;
    outbox_->released = true;
  }
  if (release) tsfn_.Release();
  return true;
}

void Context::ThreadMain() {
  std::string error;
  if (sched_->Start(&error)) {
    sched_->Run();
  } else {
    Event ev;
    ev.type = EventType::CreateFailed;
    ev.code = ErrorCodeName(ErrorCode::ContextCreateFailed);
    ev.message = error;
    Post({std::move(ev)});
  }
  Event closed;
  closed.type = EventType::Closed;
  std::vector<Event> last;
  last.push_back(std::move(closed));
  Post(std::move(last));
  bool release;
  {
    std::lock_guard<std::mutex> lk(outbox_->mu);
    release = !outbox_->released;
    outbox_->released = true;
  }
  if (release) tsfn_.Release();
}

void Context::Post(std::vector<Event> &&events) {
  Outbox *box = outbox_;
  if (box == nullptr) return;
  std::lock_guard<std::mutex> lk(box->mu);
  if (box->released) return;
  for (auto &e : events) box->events.push_back(std::move(e));
  if (box->scheduled) return;
  box->scheduled = true;
  if (tsfn_.NonBlockingCall(box, [](Napi::Env env, Napi::Function fn, Outbox *b) {
        try {
          Context::CallJs(env, fn, b);
        } catch (const Napi::Error &e) {
          // context.ts handles every event inside its own try/catch (a failure ends that
          // request with INTERNAL), so an exception here is a bug: raise it as an uncaught
          // exception instead of dropping the batch and leaving requests hanging. While the
          // environment shuts down there is nothing to raise it in, and nobody waits.
          if (env != nullptr && !e.Value().IsEmpty()) napi_fatal_exception(env, e.Value());
        }
      }) != napi_ok) {
    box->scheduled = false;
  }
}

void Context::CallJs(Napi::Env env, Napi::Function fn, Outbox *box) {
  std::vector<Event> batch;
  {
    std::lock_guard<std::mutex> lk(box->mu);
    batch.swap(box->events);
    box->scheduled = false;
  }
  if (env == nullptr || batch.empty()) return;
  fn.Call({EventsToJs(env, batch)});
}

void Context::OnFinalize(Napi::Env env, void *, Outbox *box) {
  Context *self = box->context;
  delete box;
  if (self == nullptr) return;  // the Context was collected (and its thread joined) first
  self->outbox_ = nullptr;
  if (self->thread_.joinable()) self->thread_.join();
  self->finalized_ = true;
  if (self->hookAdded_) {
    napi_remove_env_cleanup_hook(self->env_, &Context::TeardownHook, self);
    self->hookAdded_ = false;
  }
  try {
    for (auto &d : self->closeWaiters_) d.Resolve(env.Undefined());
  } catch (...) {
    // environment shutting down: nobody is waiting any more
  }
  self->closeWaiters_.clear();
}

// submit(request) -> undefined; throws QUEUE_FULL or DISPOSED. Every key is required
// (src/native/request.ts builds the request complete); the prompt arrives tokenized.
Napi::Value Context::Submit(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closeRequested_) ThrowCoded(env, ErrorCode::Disposed, "The context has been disposed");
  LLAMUX_REQUIRE_OBJECT(info, 0, "params");
  Napi::Object o = info[0].As<Napi::Object>();
  auto p = std::make_unique<RequestParams>();
  p->id = static_cast<uint64_t>(RequireNumber(env, o, "id"));
  Napi::Int32Array prompt = RequireInt32Array(env, o, "promptTokens");
  p->promptTokens.assign(prompt.Data(), prompt.Data() + prompt.ElementLength());
  // vocabulary ids, and runs of media ids of known media (media/media_js.h)
  Napi::Value mediaList = o.Get("media");
  if (!mediaList.IsNull()) p->media = media::ReadRequestMedia(env, mediaList);
  media::CheckPromptMedia(env, p->promptTokens, *model_, &p->media);
  p->maxTokens = static_cast<int32_t>(RequireInt(env, o, "maxTokens"));
  p->emitTokenIds = RequireBool(env, o, "emitTokenIds");
  p->renderSpecial = RequireBool(env, o, "renderSpecial");
  p->logprobs = static_cast<int32_t>(RequireInt(env, o, "logprobs"));
  p->detectToolCalls = RequireBool(env, o, "detectToolCalls");
  p->session = static_cast<SessionHandle>(RequireInt(env, o, "session"));
  p->sessionName = RequireString(env, o, "sessionName");
  p->waitForSession = RequireBool(env, o, "waitForSession");
  p->cacheScope = RequireString(env, o, "cacheScope");
  if (p->cacheScope.find('\x1f') != std::string::npos) ThrowCoded(env, ErrorCode::InvalidArgument, "cacheScope must not contain the character U+001F");
  {
    Napi::Int32Array ids = RequireInt32Array(env, o, "adapterIds");
    Napi::Float32Array scales = RequireFloat32Array(env, o, "adapterScales");
    if (ids.ElementLength() != scales.ElementLength()) throw Napi::RangeError::New(env, "adapterIds and adapterScales must have the same length");
    std::string why;
    if (!AdapterSet::Make(model_->adapters, ids.Data(), scales.Data(), ids.ElementLength(), &p->adapters, &why)) {
      ThrowCoded(env, ErrorCode::InvalidArgument, why);
    }
    p->cacheScope = AdapterScope(p->cacheScope, p->adapters);
  }
  p->sessionTtlMs = RequireInt(env, o, "sessionTtlMs");
  p->continueSession = RequireBool(env, o, "continueSession");
  p->prefillOnly = RequireBool(env, o, "prefillOnly");
  p->speculative = RequireBool(env, o, "speculative");
  p->progress = RequireBool(env, o, "progress");
  {
    std::string overflow = RequireString(env, o, "overflow");
    if (overflow != "stop" && overflow != "shift" && overflow != "reprefill") {
      ThrowCoded(env, ErrorCode::InvalidArgument, "overflow must be \"stop\", \"shift\" or \"reprefill\"");
    }
    p->overflow = overflow == "shift" ? Overflow::Shift : overflow == "reprefill" ? Overflow::Reprefill : Overflow::Stop;
  }
  p->nKeep = static_cast<int32_t>(RequireInt(env, o, "nKeep"));
  if (p->nKeep < -1) ThrowCoded(env, ErrorCode::InvalidArgument, "nKeep must be -1 (the prompt) or a count of tokens");
  {
    // Prompt-cache breakpoints: ascending token counts within the prompt, each with its ttl.
    Napi::Int32Array at = RequireInt32Array(env, o, "retainAt");
    Napi::Int32Array ms = RequireInt32Array(env, o, "retainMs");
    if (at.ElementLength() != ms.ElementLength() || at.ElementLength() > 4) {
      ThrowCoded(env, ErrorCode::InvalidArgument, "retainAt and retainMs must have the same length, at most 4");
    }
    for (size_t i = 0; i < at.ElementLength(); i++) {
      size_t prev = p->retain.empty() ? 0 : p->retain.back().tokens;
      if (at[i] <= 0 || static_cast<size_t>(at[i]) <= prev || static_cast<size_t>(at[i]) > p->promptTokens.size() || ms[i] <= 0) {
        ThrowCoded(env, ErrorCode::InvalidArgument, "retainAt must ascend within the prompt and retainMs be positive");
      }
      p->retain.push_back({static_cast<size_t>(at[i]), static_cast<int64_t>(ms[i])});
    }
  }
  Napi::Value expect = o.Get("expectCommitted");
  if (!expect.IsNull()) {
    Napi::Int32Array e = RequireInt32Array(env, o, "expectCommitted");
    p->hasExpect = true;
    p->expectCommitted.assign(e.Data(), e.Data() + e.ElementLength());
  }
  p->greedyToolSyntax = RequireBool(env, o, "greedyToolSyntax");
  p->toolGrammar = RequireString(env, o, "toolGrammar");
  p->toolGrammarRoot = RequireString(env, o, "toolGrammarRoot");
  p->toolRequired = RequireBool(env, o, "toolRequired");
  p->parallelToolCalls = RequireBool(env, o, "parallelToolCalls");
  p->toolEndEog = static_cast<int32_t>(RequireInt(env, o, "toolEndEog"));
  if (p->toolEndEog >= model_->n_vocab) ThrowCoded(env, ErrorCode::InvalidArgument, "toolEndEog is outside the vocabulary");
  ReadVocabTokens(env, o, "reasoningStart", model_->n_vocab, &p->reasoningStart);
  ReadVocabTokens(env, o, "reasoningEnd", model_->n_vocab, &p->reasoningEnd);
  p->reasoningOpen = RequireBool(env, o, "reasoningOpen");
  p->reasoningBudget = static_cast<int32_t>(RequireInt(env, o, "reasoningBudget"));
  {
    // Sequences separated by -1.
    std::vector<llama_token> flat;
    ReadDropTokens(env, o, model_->n_vocab, &flat);
    std::vector<llama_token> cur;
    for (llama_token t : flat) {
      if (t == -1) {
        if (!cur.empty()) p->textDrop.push_back(cur);
        cur.clear();
      } else {
        cur.push_back(t);
      }
    }
    if (!cur.empty()) p->textDrop.push_back(cur);
  }
  Napi::Value stops = o.Get("stop");
  if (!stops.IsArray()) MissingKey(env, "stop", "an array of strings");
  Napi::Array a = stops.As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value v = a.Get(i);
    if (!v.IsString()) MissingKey(env, "stop", "an array of strings");
    p->stops.push_back(v.As<Napi::String>().Utf8Value());
  }
  ReadSampling(env, o, p->sampling, model_->n_vocab);
  Enqueue(env, std::move(p));
  return env.Undefined();
}

// embed({ id, tokens, lengths, pooling }) -> undefined: `tokens` holds the inputs one after
// another, `lengths` their sizes; pooling is a llama_pooling_type (-1: the model's). The
// result arrives as an `embedded` event. Every key required; throws DISPOSED, INVALID_ARGUMENT.
Napi::Value Context::Embed(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closeRequested_) ThrowCoded(env, ErrorCode::Disposed, "The context has been disposed");
  if (!sched_) ThrowCoded(env, ErrorCode::RpcUnavailable, "The context's RPC server is gone");
  LLAMUX_REQUIRE_OBJECT(info, 0, "job");
  Napi::Object o = info[0].As<Napi::Object>();
  auto job = std::make_unique<EmbedJob>();
  job->id = static_cast<uint64_t>(RequireNumber(env, o, "id"));
  job->pooling = static_cast<int32_t>(RequireInt(env, o, "pooling"));
  Napi::Int32Array tokens = RequireInt32Array(env, o, "tokens");
  Napi::Int32Array lengths = RequireInt32Array(env, o, "lengths");
  size_t at = 0;
  for (size_t i = 0; i < lengths.ElementLength(); i++) {
    int32_t n = lengths[i];
    if (n < 0 || at + static_cast<size_t>(n) > tokens.ElementLength()) {
      ThrowCoded(env, ErrorCode::InvalidArgument, "embed: lengths do not match tokens");
    }
    std::vector<llama_token> in(tokens.Data() + at, tokens.Data() + at + n);
    for (llama_token t : in) {
      if (t < 0 || t >= model_->n_vocab) ThrowCoded(env, ErrorCode::InvalidArgument, "Token " + std::to_string(t) + " of input " + std::to_string(i) + " is outside the vocabulary");
    }
    job->inputs.push_back(std::move(in));
    at += static_cast<size_t>(n);
  }
  if (at != tokens.ElementLength()) ThrowCoded(env, ErrorCode::InvalidArgument, "embed: lengths do not match tokens");
  sched_->SubmitEmbed(std::move(job));
  return env.Undefined();
}

// Queues a request or a session command; throws RPC_UNAVAILABLE or QUEUE_FULL.
void Context::Enqueue(Napi::Env env, std::unique_ptr<RequestParams> p) {
  if (!sched_) ThrowCoded(env, ErrorCode::RpcUnavailable, "The context's RPC server is gone");
  if (!sched_->Submit(std::move(p))) {
    ThrowCoded(env, ErrorCode::QueueFull, "The request queue is full; wait for running requests to finish or raise maxQueued");
  }
}

Napi::Value Context::OpenSession(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closeRequested_) ThrowCoded(env, ErrorCode::Disposed, "The context has been disposed");
  return Napi::Number::New(env, static_cast<double>(nextSession_++));
}

// sessionCommand({ id, op: 'end' | 'fork', session, sessionName, from, wait, sessionTtlMs }) -> undefined;
// every key required. The result arrives as a sessionDone event. Throws QUEUE_FULL or DISPOSED.
Napi::Value Context::SessionCommand(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closeRequested_) ThrowCoded(env, ErrorCode::Disposed, "The context has been disposed");
  LLAMUX_REQUIRE_OBJECT(info, 0, "command");
  Napi::Object o = info[0].As<Napi::Object>();
  auto p = std::make_unique<RequestParams>();
  p->id = static_cast<uint64_t>(RequireNumber(env, o, "id"));
  p->command = std::make_unique<llamux::SessionCommand>();
  std::string op = RequireString(env, o, "op");
  if (op == "end") {
    p->command->op = llamux::SessionCommand::Op::End;
  } else if (op == "fork") {
    p->command->op = llamux::SessionCommand::Op::Fork;
  } else {
    throw Napi::TypeError::New(env, "command.op must be 'end' or 'fork'");
  }
  p->command->from = static_cast<SessionHandle>(RequireInt(env, o, "from"));
  p->session = static_cast<SessionHandle>(RequireInt(env, o, "session"));
  p->sessionName = RequireString(env, o, "sessionName");
  p->waitForSession = RequireBool(env, o, "wait");
  p->sessionTtlMs = RequireInt(env, o, "sessionTtlMs");
  Enqueue(env, std::move(p));
  return env.Undefined();
}

// stats() -> cache counters (read without stopping the engine thread)
Napi::Value Context::Stats(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (!sched_) ThrowCoded(env, ErrorCode::RpcUnavailable, "The context's RPC server is gone");
  const CacheCounters &c = sched_->Counters();
  Napi::Object o = Napi::Object::New(env);
  o.Set("ramBytes", static_cast<double>(c.ramBytes.load()));
  o.Set("ramEntries", static_cast<double>(c.ramEntries.load()));
  o.Set("ramBudget", static_cast<double>(c.ramBudget.load()));
  o.Set("ramEvictions", static_cast<double>(c.ramEvictions.load()));
  o.Set("sessions", static_cast<double>(c.sessions.load()));
  o.Set("pinnedSequences", static_cast<double>(c.pinned.load()));
  o.Set("spills", static_cast<double>(c.spills.load()));
  o.Set("restores", static_cast<double>(c.restores.load()));
  o.Set("sharedPrefixes", static_cast<double>(c.shares.load()));
  o.Set("diskBytes", static_cast<double>(c.diskBytes.load()));
  o.Set("diskEntries", static_cast<double>(c.diskEntries.load()));
  o.Set("diskBudget", static_cast<double>(c.diskBudget.load()));
  o.Set("diskRestores", static_cast<double>(c.diskRestores.load()));
  o.Set("diskRejected", static_cast<double>(c.diskRejected.load()));
  o.Set("kvCellsUsed", static_cast<double>(c.kvCellsUsed.load()));
  o.Set("kvCellsTotal", static_cast<double>(c.kvCellsTotal.load()));
  o.Set("preemptions", static_cast<double>(c.preemptions.load()));
  o.Set("idleSpills", static_cast<double>(c.idleSpills.load()));
  o.Set("checkpoints", static_cast<double>(c.checkpoints.load()));
  o.Set("checkpointBytes", static_cast<double>(c.checkpointBytes.load()));
  o.Set("checkpointRestores", static_cast<double>(c.checkpointRestores.load()));
  o.Set("specVerifications", static_cast<double>(c.specVerifications.load()));
  o.Set("specDraftedTokens", static_cast<double>(c.specDrafted.load()));
  o.Set("specAcceptedTokens", static_cast<double>(c.specAccepted.load()));
  return o;
}

Napi::Value Context::Cancel(const Napi::CallbackInfo &info) {
  LLAMUX_REQUIRE_NUMBER(info, 0, "id");
  if (!closeRequested_ && sched_) sched_->Cancel(static_cast<uint64_t>(info[0].As<Napi::Number>().DoubleValue()));
  return info.Env().Undefined();
}

Napi::Value Context::Pause(const Napi::CallbackInfo &info) {
  LLAMUX_REQUIRE_NUMBER(info, 0, "id");
  bool paused = info.Length() > 1 && info[1].ToBoolean().Value();
  if (!closeRequested_ && sched_) sched_->SetPaused(static_cast<uint64_t>(info[0].As<Napi::Number>().DoubleValue()), paused);
  return info.Env().Undefined();
}

// Keeps the process alive only while JS has work in flight on this context.
Napi::Value Context::SetRef(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  bool want = info.Length() > 0 && info[0].ToBoolean().Value();
  if (!finalized_ && want != refd_) {
    if (want) tsfn_.Ref(env); else tsfn_.Unref(env);
    refd_ = want;
  }
  return env.Undefined();
}

// close() -> Promise<void>, resolved once the engine thread has ended and freed the context.
Napi::Value Context::Close(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto d = Napi::Promise::Deferred::New(env);
  if (finalized_) {
    d.Resolve(env.Undefined());
    return d.Promise();
  }
  closeWaiters_.push_back(d);
  if (!closeRequested_) {
    closeRequested_ = true;
    if (!refd_) {
      tsfn_.Ref(env);
      refd_ = true;
    }
    if (sched_) sched_->Close();
    // A context whose RPC server died: its thread may wait on that server forever.
    if (model_ && model_->rpc && model_->rpc->IsDead()) JoinOrAbandon(200);
  }
  return d.Promise();
}

}  // namespace llamux
