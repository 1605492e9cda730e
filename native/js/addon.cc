#include "js/addon.h"
#include "model/rpc.h"

#include <ggml-backend.h>
#include <llama.h>
#include <mtmd-helper.h>

#include <algorithm>
#include <cstring>
#include <deque>

#include "model/backends.h"
#include "sampling/marker_matcher.h"
#include "js/napi_util.h"
#include "engine/text_stream.h"

namespace llamux {

namespace {

std::once_flag g_backend_once;
thread_local LogCapture *t_capture = nullptr;

struct LogLine {
  int level;
  std::string text;
};

// One sink per JS environment that called setLogger(). Lines are batched: at most one
// call into JS is queued at a time, the rest pile up behind it.
struct LogSink {
  Napi::ThreadSafeFunction tsfn;
  std::mutex mu;
  std::deque<LogLine> lines;
  bool scheduled = false;
  bool closed = false;
  int minLevel = GGML_LOG_LEVEL_WARN;  // this environment's setLogger() level
};

std::mutex g_sinks_mu;
std::vector<std::shared_ptr<LogSink>> g_sinks;
// The lowest level any environment asked for (a fast gate; each sink filters by its own).
std::atomic<int> g_min_level{GGML_LOG_LEVEL_WARN};

// Call with g_sinks_mu held.
void UpdateMinLevel() {
  int lowest = GGML_LOG_LEVEL_ERROR + 1;
  for (auto &s : g_sinks) lowest = std::min(lowest, s->minLevel);
  g_min_level.store(lowest);
}
thread_local int t_last_level = GGML_LOG_LEVEL_INFO;
constexpr size_t kMaxQueuedLines = 10000;

void DeliverLines(Napi::Env env, Napi::Function fn, LogSink *sink) {
  std::deque<LogLine> batch;
  {
    std::lock_guard<std::mutex> lk(sink->mu);
    batch.swap(sink->lines);
    sink->scheduled = false;
  }
  if (env == nullptr || batch.empty()) return;
  Napi::Array arr = Napi::Array::New(env, batch.size() * 2);
  uint32_t i = 0;
  for (auto &l : batch) {
    arr.Set(i++, Napi::Number::New(env, l.level));
    arr.Set(i++, Napi::String::New(env, l.text));
  }
  fn.Call({arr});
}

// Lines llama.cpp writes about situations the engine handles as part of its normal work: a
// decode aborted by a cancel (llama_decode returns 2) and a batch that finds no KV slot (1:
// idle KV is dropped, or a request steps back and resumes). Operators read warnings and errors
// as faults, so these are debug lines.
int HandledLevel(int lvl, const char *text) {
  if (lvl < GGML_LOG_LEVEL_WARN) return lvl;
  static const char *const kHandled[] = {
      "failed to find a memory slot for batch",         // KV full: preemption
      "failed to decode, ret = 1",                      // KV full
      "failed to decode, ret = 2",                      // aborted
      "failed to compute graph, compute status: 1",     // GGML_STATUS_ABORTED
      "graph_compute_async failed with error 1",        // GGML_STATUS_ABORTED
      "removing memory module entries for seq_id",      // the aborted ubatch's cells (Batch::KeepComputed)
  };
  for (const char *h : kHandled) {
    if (std::strstr(text, h) != nullptr) return GGML_LOG_LEVEL_DEBUG;
  }
  return lvl;
}

void LlamaLog(ggml_log_level level, const char *text, void *) {
  int lvl = level;
  if (lvl == GGML_LOG_LEVEL_CONT) lvl = t_last_level; else t_last_level = lvl = HandledLevel(lvl, text);
  if (t_capture != nullptr && lvl >= GGML_LOG_LEVEL_WARN) t_capture->Append(lvl, text);
  if (lvl < g_min_level.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lk(g_sinks_mu);
  for (auto &sink : g_sinks) {
    std::lock_guard<std::mutex> lk2(sink->mu);
    if (sink->closed || lvl < sink->minLevel) continue;
    if (sink->lines.size() >= kMaxQueuedLines) continue;  // a stuck JS side must not grow memory
    sink->lines.push_back({lvl, text});
    if (!sink->scheduled) {
      sink->scheduled = true;
      LogSink *raw = sink.get();
      if (sink->tsfn.NonBlockingCall(raw, [](Napi::Env env, Napi::Function fn, LogSink *s) {
            DeliverLines(env, fn, s);
          }) != napi_ok) {
        sink->scheduled = false;
      }
    }
  }
}

struct EnvState {
  std::shared_ptr<LogSink> sink;
  Napi::FunctionReference modelCtor;
};

Napi::Value SetLogger(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  LLAMUX_REQUIRE_NUMBER(info, 1, "level");
  auto *state = env.GetInstanceData<EnvState>();
  int level = info[1].As<Napi::Number>().Int32Value();
  // Replace this environment's sink.
  if (state->sink) {
    std::lock_guard<std::mutex> lk(g_sinks_mu);
    {
      std::lock_guard<std::mutex> lk2(state->sink->mu);
      state->sink->closed = true;
    }
    g_sinks.erase(std::remove(g_sinks.begin(), g_sinks.end(), state->sink), g_sinks.end());
    UpdateMinLevel();
    state->sink->tsfn.Release();
    state->sink.reset();
  }
  if (info.Length() > 0 && info[0].IsFunction()) {
    auto sink = std::make_shared<LogSink>();
    sink->tsfn = Napi::ThreadSafeFunction::New(env, info[0].As<Napi::Function>(), "llamux.log", 0, 1);
    sink->tsfn.Unref(env);  // logging never keeps the process alive
    sink->minLevel = level;
    std::lock_guard<std::mutex> lk(g_sinks_mu);
    g_sinks.push_back(sink);
    UpdateMinLevel();
    state->sink = sink;
  }
  return env.Undefined();
}

Napi::Value SystemInfo(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  EnsureBackend();
  Napi::Object o = Napi::Object::New(env);
  o.Set("llamaSystemInfo", llama_print_system_info());
  o.Set("supportsGpuOffload", llama_supports_gpu_offload());
  o.Set("supportsMmap", llama_supports_mmap());
  o.Set("maxParallelSequences", static_cast<double>(llama_max_parallel_sequences()));
  o.Set("maxDevices", static_cast<double>(llama_max_devices()));
  const BackendReport &b = LoadBackends();
  o.Set("buildKind", b.buildKind);
  o.Set("cpuVariant", b.cpuVariant);
  o.Set("backendDirectory", b.directory);
  o.Set("backendError", b.error);
  Napi::Array loaded = Napi::Array::New(env, b.loaded.size());
  for (size_t i = 0; i < b.loaded.size(); i++) loaded.Set(static_cast<uint32_t>(i), b.loaded[i]);
  o.Set("loadedBackends", loaded);
  Napi::Array avail = Napi::Array::New(env, b.available.size());
  for (size_t i = 0; i < b.available.size(); i++) avail.Set(static_cast<uint32_t>(i), b.available[i]);
  o.Set("cpuVariants", avail);
  Napi::Array devices = Napi::Array::New(env);
  for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    Napi::Object dev = Napi::Object::New(env);
    dev.Set("name", ggml_backend_dev_name(d));
    dev.Set("description", ggml_backend_dev_description(d));
    const char *type = "cpu";
    switch (ggml_backend_dev_type(d)) {
      case GGML_BACKEND_DEVICE_TYPE_GPU: type = "gpu"; break;
      case GGML_BACKEND_DEVICE_TYPE_IGPU: type = "igpu"; break;
      case GGML_BACKEND_DEVICE_TYPE_ACCEL: type = "accel"; break;
      default: break;
    }
    dev.Set("type", type);
    size_t freeMem = 0, totalMem = 0;
    ggml_backend_dev_memory(d, &freeMem, &totalMem);
    dev.Set("memoryFree", static_cast<double>(freeMem));
    dev.Set("memoryTotal", static_cast<double>(totalMem));
    devices.Set(devices.Length(), dev);
  }
  o.Set("devices", devices);
  return o;
}

std::vector<llama_token> ToTokens(Napi::Value v) {
  std::vector<llama_token> out;
  if (!v.IsTypedArray()) return out;
  Napi::Int32Array a = v.As<Napi::Int32Array>();
  out.assign(a.Data(), a.Data() + a.ElementLength());
  return out;
}

// Test hook: runs the native marker matcher over a token stream.
// (markers {start,end,payloadStart?,payloadEnd?}: Int32Array, tokens: Int32Array) -> [kind, Int32Array][]
Napi::Value TestMarkerMatcher(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  LLAMUX_REQUIRE_OBJECT(info, 0, "markers");
  LLAMUX_REQUIRE_INT32ARRAY(info, 1, "tokens");
  Napi::Object m = info[0].As<Napi::Object>();
  MarkerSet set;
  set.start = ToTokens(m.Get("start"));
  set.end = ToTokens(m.Get("end"));
  set.payloadStart = ToTokens(m.Get("payloadStart"));
  set.payloadEnd = ToTokens(m.Get("payloadEnd"));
  if (!set.Enabled()) throw Napi::TypeError::New(env, "start and end markers are required");
  MarkerMatcher matcher(&set);
  std::vector<MarkerMatcher::Output> outs;
  Napi::Int32Array tokens = info[1].As<Napi::Int32Array>();
  Napi::Array greedy = Napi::Array::New(env, tokens.ElementLength());
  for (size_t i = 0; i < tokens.ElementLength(); i++) {
    matcher.Push(tokens[i], &outs);
    greedy.Set(static_cast<uint32_t>(i), matcher.WantsGreedy());
  }
  matcher.Flush(&outs);
  static const char *names[] = {"text", "body", "open", "close", "payloadOpen", "payloadClose"};
  Napi::Array arr = Napi::Array::New(env, outs.size());
  for (size_t i = 0; i < outs.size(); i++) {
    Napi::Array pair = Napi::Array::New(env, 2);
    pair.Set(0u, names[static_cast<int>(outs[i].kind)]);
    Napi::Int32Array t = Napi::Int32Array::New(env, outs[i].tokens.size());
    std::copy(outs[i].tokens.begin(), outs[i].tokens.end(), t.Data());
    pair.Set(1u, t);
    arr.Set(static_cast<uint32_t>(i), pair);
  }
  Napi::Object result = Napi::Object::New(env);
  result.Set("outputs", arr);
  result.Set("greedy", greedy);
  result.Set("region", static_cast<int>(matcher.region()));
  return result;
}

// Test hook: the stop-string / UTF-8 stream over byte pieces.
// (stops: string[], pieces: Uint8Array[]) -> { text, stopped, stopIndex }
Napi::Value TestTextStream(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  std::vector<std::string> stops;
  Napi::Array sa = info[0].As<Napi::Array>();
  for (uint32_t i = 0; i < sa.Length(); i++) stops.push_back(sa.Get(i).As<Napi::String>().Utf8Value());
  TextStream ts(stops);
  Napi::Array pieces = info[1].As<Napi::Array>();
  std::string out;
  Napi::Array deltas = Napi::Array::New(env);
  bool stopped = false;
  uint32_t i = 0;
  for (; i < pieces.Length(); i++) {
    Napi::Uint8Array p = pieces.Get(i).As<Napi::Uint8Array>();
    std::string delta;
    stopped = ts.Push(std::string(reinterpret_cast<const char *>(p.Data()), p.ElementLength()), &delta);
    out += delta;
    deltas.Set(i, Napi::Buffer<char>::Copy(env, delta.data(), delta.size()));
    if (stopped) break;
  }
  if (!stopped) {
    std::string rest;
    ts.Flush(&rest);
    out += rest;
  }
  Napi::Object r = Napi::Object::New(env);
  r.Set("text", Napi::Buffer<char>::Copy(env, out.data(), out.size()));
  r.Set("deltas", deltas);
  r.Set("stopped", stopped);
  r.Set("stopAt", stopped ? static_cast<double>(i) : -1.0);
  return r;
}

void CleanupEnv(EnvState *state) {
  if (state->sink) {
    std::lock_guard<std::mutex> lk(g_sinks_mu);
    {
      std::lock_guard<std::mutex> lk2(state->sink->mu);
      state->sink->closed = true;
    }
    g_sinks.erase(std::remove(g_sinks.begin(), g_sinks.end(), state->sink), g_sinks.end());
    UpdateMinLevel();
  }
}

}  // namespace

void EnsureBackend() {
  std::call_once(g_backend_once, [] {
    llama_log_set(LlamaLog, nullptr);
    mtmd_helper_log_set(LlamaLog, nullptr);  // libmtmd (projectors, media) logs the same way
    llama_backend_init();
    LoadBackends();
  });
}

LogCapture::LogCapture() : prev_(t_capture) { t_capture = this; }
LogCapture::~LogCapture() { t_capture = prev_; }
std::string LogCapture::Text() const { return text_; }
void LogCapture::Append(int, const char *text) {
  if (text_.size() < 4096) text_ += text;
}

// startRpcServer({ host, port, threads, cacheDir }, onExit) -> { endpoint, devices: [...] }
// Serves this process's devices to RPC clients from a native thread (ggml's server loop,
// which never returns unless it fails); onExit is called if it does. Throws
// RPC_UNAVAILABLE when the address cannot be bound.
Napi::Value StartRpcServer(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  LLAMUX_REQUIRE_OBJECT(info, 0, "options");
  LLAMUX_REQUIRE_FUNCTION(info, 1, "onExit");
  Napi::Object o = info[0].As<Napi::Object>();
  std::string host = GetString(o, "host", "127.0.0.1");
  int port = static_cast<int>(GetInt(o, "port", 50052));
  int threads = static_cast<int>(GetInt(o, "threads", 0));
  std::string cacheDir = GetString(o, "cacheDir", "");
  auto tsfn = std::make_shared<Napi::ThreadSafeFunction>(
      Napi::ThreadSafeFunction::New(env, info[1].As<Napi::Function>(), "llamux.rpcServer", 0, 1));
  std::vector<rpc::ServerDevice> devices;
  std::string error;
  bool ok = rpc::StartServer(host, port, cacheDir, threads, &devices, &error, [tsfn] {
    tsfn->BlockingCall();
    tsfn->Release();
  });
  if (!ok) {
    tsfn->Release();
    ThrowCoded(env, ErrorCode::RpcUnavailable, error);
  }
  tsfn->Unref(env);  // the server thread keeps the process alive, not this callback
  Napi::Object r = Napi::Object::New(env);
  r.Set("endpoint", host + ":" + std::to_string(port));
  Napi::Array arr = Napi::Array::New(env, devices.size());
  for (size_t i = 0; i < devices.size(); i++) {
    Napi::Object d = Napi::Object::New(env);
    d.Set("name", devices[i].name);
    d.Set("description", devices[i].description);
    d.Set("memoryFree", static_cast<double>(devices[i].memoryFree));
    d.Set("memoryTotal", static_cast<double>(devices[i].memoryTotal));
    arr.Set(static_cast<uint32_t>(i), d);
  }
  r.Set("devices", arr);
  return r;
}

namespace addon {
Napi::FunctionReference &ModelConstructor(Napi::Env env) { return env.GetInstanceData<EnvState>()->modelCtor; }

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  EnsureBackend();
  auto *state = new EnvState();
  env.SetInstanceData<EnvState>(state);
  env.AddCleanupHook([state]() { CleanupEnv(state); });
  exports.Set("setLogger", Napi::Function::New(env, SetLogger, "setLogger"));
  exports.Set("systemInfo", Napi::Function::New(env, SystemInfo, "systemInfo"));
  exports.Set("startRpcServer", Napi::Function::New(env, StartRpcServer, "startRpcServer"));
  Napi::Object testing = Napi::Object::New(env);
  testing.Set("markerMatcher", Napi::Function::New(env, TestMarkerMatcher, "markerMatcher"));
  testing.Set("textStream", Napi::Function::New(env, TestTextStream, "textStream"));
  exports.Set("testing", testing);
  return exports;
}
}  // namespace addon

}  // namespace llamux
