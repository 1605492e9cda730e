#include "model/model.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <regex>
#include <thread>
#include <vector>

#include <ggml-backend.h>
#include <gguf.h>

#include "llama-model.h"  // llama_internal_get_tensor_map: where each weight was placed

#include "js/addon.h"
#include "engine/errors.h"
#include "kv/hash.h"
#include "js/napi_util.h"
#include "media/projector.h"
#include "model/backends.h"

namespace llamux {


namespace {

// Weights in ggml's extra CPU buffer types (AMX tiles, repacked blocks) are multiplied by other
// kernels. On the AMX variant (sapphirerapids) those kernels were wrong for batched planes
// (patch amx-broadcast-src0), and for recurrent/hybrid models (per-sequence planes) their sums
// still change with the rows decoded beside a row even with patch det-amx, which breaks
// deterministic mode (qwen35, qwen35moe, lfm2: the paths-zoo sweep). Until that is found, such
// models on the AMX variant keep their weights in plain CPU buffers (the AVX-512 kernels zen4
// runs); attention-only models keep AMX (prefill 2.6x, decode 1.5x on the 250 M Q8_0 bench model).
bool ExtraBuffersSafe() { return LoadBackends().cpuVariant != "sapphirerapids"; }
const napi_type_tag kModelTag = {0x6c6c616d75784d6fULL, 0x64656c5461673031ULL};

// Weights fingerprint: file size plus 64 evenly spread 4 KiB samples of the file,
// with the metadata. Cheap for multi-GB files, and different weights differ.
std::string Fingerprint(const std::string &path, llama_model *model) {
  Hash128 h;
  FILE *f = fopen(path.c_str(), "rb");
  if (f != nullptr) {
    if (fseeko(f, 0, SEEK_END) == 0) {
      int64_t size = ftello(f);
      h.UpdateValue(size);
      std::vector<uint8_t> buf(4096);
      const int kSamples = 64;
      for (int i = 0; i < kSamples && size > 0; i++) {
        int64_t off = (size > 4096) ? (size - 4096) * i / (kSamples - 1) : 0;
        if (fseeko(f, off, SEEK_SET) != 0) break;
        size_t n = fread(buf.data(), 1, buf.size(), f);
        h.Update(buf.data(), n);
        if (size <= 4096) break;
      }
    }
    fclose(f);
  }
  char key[256];
  std::vector<char> val(1024);
  int n = llama_model_meta_count(model);
  for (int i = 0; i < n; i++) {
    if (llama_model_meta_key_by_index(model, i, key, sizeof(key)) < 0) continue;
    int32_t len = llama_model_meta_val_str_by_index(model, i, val.data(), val.size());
    h.UpdateString(key);
    if (len > 0) h.Update(val.data(), std::min<size_t>(static_cast<size_t>(len), val.size()));
  }
  h.UpdateValue(llama_model_n_params(model));
  return h.Hex();
}

struct LoadOptions {
  std::string path;
  int32_t gpuLayers = 0;
  bool vocabOnly = false;
  bool useMmap = true;
  bool useMlock = false;
  bool checkTensors = false;
  bool mtp = false;  // load the multi-token-prediction blocks too (speculative mode "mtp")
  std::vector<std::string> rpcServers;  // host:port of each RPC server (empty: local)
  std::vector<float> tensorSplit;       // share of the layers per device (RPC devices, then local GPUs)
  // Patterns (std::regex, searched in the tensor name) of weights kept in a CPU buffer on an
  // offloaded layer: a MoE model's experts (cpuMoe / nCpuMoe, src/model/moe.ts).
  std::vector<std::string> cpuTensors;
};

// llama_model_params.tensor_buft_overrides for `cpuTensors`, terminated by a null pattern.
// The entries point into `opts.cpuTensors`: the LoadOptions must outlive the load.
std::vector<llama_model_tensor_buft_override> CpuOverrides(const LoadOptions &opts) {
  std::vector<llama_model_tensor_buft_override> out;
  if (opts.cpuTensors.empty()) return out;
  for (const std::string &pattern : opts.cpuTensors) out.push_back({pattern.c_str(), ggml_backend_cpu_buffer_type()});
  out.push_back({nullptr, nullptr});
  return out;
}

// What a load on a helper thread shares with the worker that waits for it. The helper may
// be abandoned (an RPC server died and it waits on it forever), so it owns nothing of the
// worker's: everything it touches lives here.
struct RpcLoad {
  std::mutex mu;
  std::atomic<bool> done{false};
  llama_model *model = nullptr;
  std::string error, log;
  bool rpcError = false;  // error is RPC_UNAVAILABLE (not MODEL_INVALID)
  int32_t *abortFlag = nullptr;  // nullptr once the worker gave up (guarded by mu)
  std::function<void(float)> progress;  // guarded by mu
};

class LoadWorker : public Napi::AsyncProgressWorker<float> {
 public:
  LoadWorker(Napi::Env env, LoadOptions opts, Napi::Int32Array abortFlag, Napi::Function onProgress)
      : Napi::AsyncProgressWorker<float>(env, "llamux.loadModel"),
        deferred_(Napi::Promise::Deferred::New(env)),
        opts_(std::move(opts)) {
    abortRef_ = Napi::Persistent(abortFlag);
    abortPtr_ = abortFlag.Data();
    if (!onProgress.IsEmpty()) progressRef_ = Napi::Persistent(onProgress);
  }

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute(const ExecutionProgress &progress) override {
    EnsureBackend();
    if (!opts_.rpcServers.empty()) {
      ExecuteRpc(progress);
      return;
    }
    LogCapture capture;
    progress_ = &progress;
    llama_model_params p = llama_model_default_params();
    p.n_gpu_layers = opts_.gpuLayers;
    p.vocab_only = opts_.vocabOnly;
    p.check_tensors = opts_.checkTensors;
    p.load_mtp = opts_.mtp;
    std::vector<float> split(llama_max_devices(), 0.0f);
    for (size_t i = 0; i < opts_.tensorSplit.size() && i < split.size(); i++) split[i] = opts_.tensorSplit[i];
    if (!opts_.tensorSplit.empty()) p.tensor_split = split.data();
    const std::vector<llama_model_tensor_buft_override> overrides = CpuOverrides(opts_);
    if (!overrides.empty()) p.tensor_buft_overrides = overrides.data();
    if (!opts_.useMmap) p.load_mode = opts_.useMlock ? LLAMA_LOAD_MODE_MLOCK : LLAMA_LOAD_MODE_NONE;
    else if (opts_.useMlock) p.load_mode = LLAMA_LOAD_MODE_MMAP_MLOCK;
    p.progress_callback = &LoadWorker::OnLlamaProgress;
    p.progress_callback_user_data = this;
    try {
      model_ = llama_model_load_from_file(opts_.path.c_str(), p);
      // A recurrent/hybrid model on the AMX variant: again, with its weights in plain buffers.
      if (model_ != nullptr && !ExtraBuffersSafe() && (llama_model_is_recurrent(model_) || llama_model_is_hybrid(model_))) {
        llama_model_free(model_);
        p.use_extra_bufts = false;
        model_ = llama_model_load_from_file(opts_.path.c_str(), p);
      }
    } catch (const std::exception &e) {
      model_ = nullptr;
      detail_ = e.what();
    }
    if (model_ == nullptr) {
      if (Aborted()) {
        code_ = ErrorCode::Aborted;
        message_ = "Model loading was aborted";
      } else {
        code_ = ErrorCode::ModelInvalid;
        std::string why = capture.Text();
        if (why.empty()) why = detail_;
        while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
        message_ = "Failed to load model \"" + opts_.path + "\": not a valid GGUF model this llama.cpp can load";
        if (!why.empty()) message_ += " (llama.cpp: " + why + ")";
      }
      SetError(message_);
      return;
    }
    if (RefuseWithoutVocabulary() || RefuseAbortingTensors()) return;
    fingerprint_ = Fingerprint(opts_.path, model_);
  }

  // A model without a vocabulary (tokenizer.ggml.model "none") loads in llama.cpp but aborts
  // the process on its first generation (GGML_ASSERT in llama-vocab.cpp): refused here with a
  // typed error. True when refused (the model is freed).
  bool RefuseWithoutVocabulary() {
    const llama_vocab *vocab = llama_model_get_vocab(model_);
    if (llama_vocab_type(vocab) != LLAMA_VOCAB_TYPE_NONE) return false;
    FreeModel();
    code_ = ErrorCode::Unsupported;
    message_ = "Model \"" + opts_.path +
               "\" has no vocabulary (tokenizer.ggml.model is \"none\"): llamux needs a tokenizer to run a model";
    SetError(message_);
    return true;
  }

  // Tensors llama.cpp loads but whose first use aborts the process inside ggml: BERT-style
  // models add the token-type row with ggml_add, which takes no F16 operand. True when refused.
  bool RefuseAbortingTensors() {
    gguf_init_params params = {/*no_alloc =*/true, /*ctx =*/nullptr};
    gguf_context *g = gguf_init_from_file(opts_.path.c_str(), params);
    if (g == nullptr) return false;  // llama.cpp read it; nothing more to check here
    const int64_t id = gguf_find_tensor(g, "token_types.weight");
    const ggml_type type = id >= 0 ? gguf_get_tensor_type(g, id) : GGML_TYPE_F32;
    gguf_free(g);
    if (type == GGML_TYPE_F32) return false;
    FreeModel();
    code_ = ErrorCode::Unsupported;
    message_ = "Model \"" + opts_.path + "\" stores token_types.weight as " + ggml_type_name(type) +
               ": llama.cpp adds that tensor with an operation that needs F32 and would abort; convert the model with token_types in F32";
    SetError(message_);
    return true;
  }

  void FreeModel() {
    llama_model *m = model_;
    model_ = nullptr;
    if (group_) {
      rpc::RunGuarded(group_, [m] { llama_model_free(m); }, 10000);
    } else {
      llama_model_free(m);
    }
  }

  // A model with layers on RPC servers: connect and load on a helper thread, and give up on
  // it (RPC_UNAVAILABLE) when a server dies while it waits on that server.
  void ExecuteRpc(const ExecutionProgress &progress) {
    group_ = rpc::NewGroup(opts_.rpcServers);
    auto st = std::make_shared<RpcLoad>();
    st->abortFlag = abortPtr_;
    st->progress = [&progress](float v) { progress.Send(&v, 1); };
    LoadOptions opts = opts_;
    std::shared_ptr<rpc::Group> group = group_;
    std::thread([st, opts, group] {
      LogCapture capture;
      std::vector<ggml_backend_dev_t> devices;
      std::string error;
      if (!rpc::Connect(*group, &devices, &error)) {
        std::lock_guard<std::mutex> lk(st->mu);
        st->error = error;
        st->rpcError = true;
        st->done.store(true);
        return;
      }
      // Only this model's RPC devices (never registered globally, so local models stay
      // local), then the local GPUs; the CPU holds what is not offloaded.
      for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        auto t = ggml_backend_dev_type(d);
        if (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU) devices.push_back(d);
      }
      devices.push_back(nullptr);
      std::vector<float> split(llama_max_devices(), 0.0f);
      for (size_t i = 0; i < opts.tensorSplit.size() && i < split.size(); i++) split[i] = opts.tensorSplit[i];
      llama_model_params p = llama_model_default_params();
      p.devices = devices.data();
      p.n_gpu_layers = opts.gpuLayers;
      if (!opts.tensorSplit.empty()) p.tensor_split = split.data();
      const std::vector<llama_model_tensor_buft_override> overrides = CpuOverrides(opts);
      if (!overrides.empty()) p.tensor_buft_overrides = overrides.data();
      p.check_tensors = opts.checkTensors;
      p.load_mtp = opts.mtp;
      if (!opts.useMmap) p.load_mode = opts.useMlock ? LLAMA_LOAD_MODE_MLOCK : LLAMA_LOAD_MODE_NONE;
      else if (opts.useMlock) p.load_mode = LLAMA_LOAD_MODE_MMAP_MLOCK;
      p.progress_callback = [](float value, void *user) -> bool {
        auto *s = static_cast<RpcLoad *>(user);
        std::lock_guard<std::mutex> lk(s->mu);
        if (s->abortFlag == nullptr || __atomic_load_n(s->abortFlag, __ATOMIC_ACQUIRE) != 0) return false;
        if (s->progress) s->progress(value);
        return true;
      };
      p.progress_callback_user_data = st.get();
      llama_model *m = nullptr;
      try {
        m = llama_model_load_from_file(opts.path.c_str(), p);
      } catch (const std::exception &e) {
        error = e.what();
      }
      std::lock_guard<std::mutex> lk(st->mu);
      st->model = m;
      st->error = error;
      st->log = capture.Text();
      if (st->abortFlag == nullptr && m != nullptr) {
        // The worker gave up on this load: free it if the servers still answer.
        rpc::RunGuarded(group, [m] { llama_model_free(m); }, 10000);
        st->model = nullptr;
      }
      st->done.store(true);
    }).detach();
    bool finished = rpc::WaitUnlessDead(*group_, [&] { return st->done.load(); });
    std::lock_guard<std::mutex> lk(st->mu);
    st->abortFlag = nullptr;  // the helper must not touch the worker any more
    st->progress = nullptr;
    if (!finished) {
      code_ = ErrorCode::RpcUnavailable;
      message_ = "Failed to load model \"" + opts_.path + "\": " + group_->Message();
      SetError(message_);
      return;
    }
    if (st->model == nullptr) {
      if (st->rpcError) {
        code_ = ErrorCode::RpcUnavailable;
        message_ = st->error;
      } else if (Aborted()) {
        code_ = ErrorCode::Aborted;
        message_ = "Model loading was aborted";
      } else {
        code_ = ErrorCode::ModelInvalid;
        std::string why = st->log.empty() ? st->error : st->log;
        while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
        message_ = "Failed to load model \"" + opts_.path + "\" across RPC servers";
        if (!why.empty()) message_ += " (llama.cpp: " + why + ")";
      }
      SetError(message_);
      return;
    }
    model_ = st->model;
    st->model = nullptr;
    if (RefuseWithoutVocabulary() || RefuseAbortingTensors()) return;
    fingerprint_ = Fingerprint(opts_.path, model_);
  }

  void OnProgress(const float *data, size_t count) override {
    if (count == 0 || progressRef_.IsEmpty()) return;
    Napi::HandleScope scope(Env());
    progressRef_.Call({Napi::Number::New(Env(), data[count - 1])});
  }

  void OnOK() override {
    Napi::Env env = Env();
    auto handle = std::make_shared<ModelHandle>();
    handle->model = model_;
    handle->vocab = llama_model_get_vocab(model_);
    handle->n_vocab = llama_vocab_n_tokens(handle->vocab);
    handle->path = opts_.path;
    handle->fingerprint = fingerprint_;
    handle->rpc = group_;
    handle->mtpLoaded = opts_.mtp && !opts_.vocabOnly && llama_model_n_layer_nextn(model_) > 0;
    model_ = nullptr;
    auto *holder = new std::shared_ptr<ModelHandle>(handle);
    Napi::External<std::shared_ptr<ModelHandle>> ext = Napi::External<std::shared_ptr<ModelHandle>>::New(
        env, holder, [](Napi::Env, std::shared_ptr<ModelHandle> *p) { delete p; });
    Napi::Object obj = addon::ModelConstructor(env).New({ext});
    deferred_.Resolve(obj);
  }

  void OnError(const Napi::Error &) override {
    deferred_.Reject(CodedError(Env(), code_, message_).Value());
  }

  ~LoadWorker() override {
    if (model_ == nullptr) return;
    if (!group_) {
      llama_model_free(model_);
      return;
    }
    llama_model *m = model_;
    rpc::RunGuarded(group_, [m] { llama_model_free(m); }, 10000);
  }

 private:
  bool Aborted() const { return __atomic_load_n(abortPtr_, __ATOMIC_ACQUIRE) != 0; }

  static bool OnLlamaProgress(float value, void *user) {
    auto *self = static_cast<LoadWorker *>(user);
    if (self->Aborted()) return false;
    if (self->progress_ != nullptr) self->progress_->Send(&value, 1);
    return true;
  }

  Napi::Promise::Deferred deferred_;
  LoadOptions opts_;
  Napi::Reference<Napi::Int32Array> abortRef_;
  int32_t *abortPtr_ = nullptr;
  Napi::FunctionReference progressRef_;
  const ExecutionProgress *progress_ = nullptr;
  llama_model *model_ = nullptr;
  std::string fingerprint_;
  std::shared_ptr<rpc::Group> group_;
  ErrorCode code_ = ErrorCode::Internal;
  std::string message_, detail_;
};

}  // namespace

ModelHandle::~ModelHandle() {
  projector.reset();  // libmtmd's context refers to the text model: freed first
  if (model == nullptr) return;
  if (!rpc) {
    llama_model_free(model);
    return;
  }
  // Freeing sends to the servers: never on a dead one (leaked), and never waiting forever.
  llama_model *m = model;
  rpc::RunGuarded(rpc, [m] { llama_model_free(m); }, 10000);
}

Napi::Object Model::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function ctor = DefineClass(env, "Model", {
      StaticMethod<&Model::Load>("load"),
      InstanceMethod<&Model::Tokenize>("tokenize"),
      InstanceMethod<&Model::TokenizeAsync>("tokenizeAsync"),
      InstanceMethod<&Model::Detokenize>("detokenize"),
      InstanceMethod<&Model::TokenPiece>("tokenPiece"),
      InstanceMethod<&Model::TokenInfo>("tokenInfo"),
      InstanceMethod<&Model::VocabInfo>("vocabInfo"),
      InstanceMethod<&Model::Metadata>("metadata"),
      InstanceMethod<&Model::Dispose>("dispose"),
      InstanceMethod<&Model::RpcState>("rpcState"),
      InstanceMethod<&Model::LoadAdapter>("loadAdapter"),
      InstanceMethod<&Model::Placement>("placement"),
  });
  addon::ModelConstructor(env) = Napi::Persistent(ctor);
  exports.Set("Model", ctor);
  // lowerThreadPriority(delta) -> boolean: raises the calling thread's nice value by `delta`
  // (Linux: threads are scheduled on their own). The server's prompt workers call it, so that
  // tokenizing untrusted text never competes with the event loop and the engine thread as an equal.
  exports.Set("lowerThreadPriority", Napi::Function::New(env, [](const Napi::CallbackInfo &info) -> Napi::Value {
#ifdef __linux__
    int delta = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : 10;
    pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
    if (errno != 0) return Napi::Boolean::New(info.Env(), false);
    return Napi::Boolean::New(info.Env(), setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(19, cur + delta)) == 0);
#else
    return Napi::Boolean::New(info.Env(), false);
#endif
  }, "lowerThreadPriority"));
  return exports;
}

Model::Model(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Model>(info) {
  if (info.Length() < 1 || !info[0].IsExternal()) {
    throw Napi::TypeError::New(info.Env(), "Model cannot be constructed directly; use loadModel()");
  }
  handle_ = *info[0].As<Napi::External<std::shared_ptr<ModelHandle>>>().Data();
  info.This().As<Napi::Object>().TypeTag(&kModelTag);
}

Model *Model::Unwrap(Napi::Value v) {
  if (!v.IsObject() || !v.As<Napi::Object>().CheckTypeTag(&kModelTag)) return nullptr;
  return Napi::ObjectWrap<Model>::Unwrap(v.As<Napi::Object>());
}

std::shared_ptr<ModelHandle> Model::Handle(Napi::Env env) const {
  if (!handle_) ThrowCoded(env, ErrorCode::Disposed, "The model has been disposed");
  return handle_;
}

// load(path, options, abortFlag: Int32Array(1), onProgress?) -> Promise<Model>
Napi::Value Model::Load(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  LLAMUX_REQUIRE_STRING(info, 0, "path");
  LLAMUX_REQUIRE_OBJECT(info, 1, "options");
  LLAMUX_REQUIRE_INT32ARRAY(info, 2, "abortFlag");
  Napi::Object o = info[1].As<Napi::Object>();
  LoadOptions opts;
  opts.path = info[0].As<Napi::String>().Utf8Value();
  opts.gpuLayers = static_cast<int32_t>(GetInt(o, "gpuLayers", 0));
  opts.vocabOnly = GetBool(o, "vocabOnly", false);
  opts.useMmap = GetBool(o, "useMmap", true);
  opts.useMlock = GetBool(o, "useMlock", false);
  opts.checkTensors = GetBool(o, "checkTensors", false);
  opts.mtp = GetBool(o, "mtp", false);
  Napi::Value servers = o.Get("rpcServers");
  if (servers.IsArray()) {
    Napi::Array a = servers.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); i++) {
      Napi::Value v = a.Get(i);
      if (!v.IsString()) throw Napi::TypeError::New(env, "rpcServers must hold strings");
      opts.rpcServers.push_back(v.As<Napi::String>().Utf8Value());
    }
  }
  Napi::Value split = o.Get("tensorSplit");
  if (split.IsArray()) {
    Napi::Array a = split.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); i++) opts.tensorSplit.push_back(a.Get(i).ToNumber().FloatValue());
  }
  Napi::Value cpuTensors = o.Get("cpuTensors");
  if (cpuTensors.IsArray()) {
    Napi::Array a = cpuTensors.As<Napi::Array>();
    if (a.Length() + 1 > llama_max_tensor_buft_overrides()) ThrowCoded(env, ErrorCode::InvalidArgument, "cpuTensors: too many patterns");
    for (uint32_t i = 0; i < a.Length(); i++) {
      Napi::Value v = a.Get(i);
      if (!v.IsString()) ThrowCoded(env, ErrorCode::InvalidArgument, "cpuTensors must hold strings");
      std::string pattern = v.As<Napi::String>().Utf8Value();
      // llama.cpp compiles each pattern while it loads, where a bad one would throw from deep
      // inside the loader: checked here.
      try {
        std::regex check(pattern);
      } catch (const std::regex_error &e) {
        ThrowCoded(env, ErrorCode::InvalidArgument, "cpuTensors: \"" + pattern + "\" is not a valid regular expression (" + e.what() + ")");
      }
      opts.cpuTensors.push_back(std::move(pattern));
    }
  }
  Napi::Int32Array flag = info[2].As<Napi::Int32Array>();
  if (flag.ElementLength() < 1) throw Napi::RangeError::New(env, "abortFlag must have one element");
  Napi::Function onProgress;
  if (info.Length() > 3 && info[3].IsFunction()) onProgress = info[3].As<Napi::Function>();
  auto *worker = new LoadWorker(env, std::move(opts), flag, onProgress);
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value Model::Metadata(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = Handle(env);
  llama_model *m = h->model;
  Napi::Object o = Napi::Object::New(env);
  Napi::Object kv = Napi::Object::New(env);
  char key[512];
  std::vector<char> val(1 << 16);
  int n = llama_model_meta_count(m);
  for (int i = 0; i < n; i++) {
    if (llama_model_meta_key_by_index(m, i, key, sizeof(key)) < 0) continue;
    int32_t len = llama_model_meta_val_str_by_index(m, i, val.data(), val.size());
    if (len >= static_cast<int32_t>(val.size())) {
      val.resize(static_cast<size_t>(len) + 1);
      len = llama_model_meta_val_str_by_index(m, i, val.data(), val.size());
    }
    kv.Set(key, Napi::String::New(env, len > 0 ? std::string(val.data(), static_cast<size_t>(len)) : std::string()));
  }
  o.Set("gguf", kv);
  char desc[256];
  llama_model_desc(m, desc, sizeof(desc));
  o.Set("description", desc);
  o.Set("nCtxTrain", llama_model_n_ctx_train(m));
  o.Set("nEmbd", llama_model_n_embd(m));
  int32_t nLayer = llama_model_n_layer(m);
  o.Set("nLayer", nLayer);
  // Per-layer facts abort inside llama.cpp when there are no layers (vocab-only loads).
  o.Set("nHead", nLayer > 0 ? llama_model_n_head(m) : 0);
  o.Set("nHeadKv", nLayer > 0 ? llama_model_n_head_kv(m) : 0);
  o.Set("nSwa", nLayer > 0 ? llama_model_n_swa(m) : 0);
  o.Set("nParams", static_cast<double>(llama_model_n_params(m)));
  o.Set("sizeBytes", static_cast<double>(llama_model_size(m)));
  o.Set("isRecurrent", llama_model_is_recurrent(m));
  o.Set("isHybrid", llama_model_is_hybrid(m));
  o.Set("hasEncoder", llama_model_has_encoder(m));
  o.Set("mtpLayers", nLayer > 0 ? llama_model_n_layer_nextn(m) : 0);
  o.Set("mtpLoaded", h->mtpLoaded);
  const char *tmpl = llama_model_chat_template(m, nullptr);
  o.Set("chatTemplate", tmpl != nullptr ? Napi::String::New(env, tmpl) : env.Null());
  o.Set("fingerprint", h->fingerprint);
  return o;
}

// rpcState() -> null (a local model) | { servers: string[], dead: boolean, message: string }
Napi::Value Model::RpcState(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = Handle(env);
  if (!h->rpc) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  Napi::Array servers = Napi::Array::New(env, h->rpc->endpoints.size());
  for (size_t i = 0; i < h->rpc->endpoints.size(); i++) servers.Set(static_cast<uint32_t>(i), h->rpc->endpoints[i]);
  o.Set("servers", servers);
  o.Set("dead", h->rpc->IsDead());
  o.Set("message", h->rpc->Message());
  return o;
}

// placement() -> { tensors: [{ name, bytes, bufferType, device }] }: where llama.cpp put each
// weight. `device` is "CPU" for host buffers (plain, mapped, repacked), else the ggml device
// (Vulkan0, CUDA0, RPC0[host:port] ...).
Napi::Value Model::Placement(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = Handle(env);
  const auto &tensors = llama_internal_get_tensor_map(h->model);
  Napi::Array list = Napi::Array::New(env, tensors.size());
  uint32_t i = 0;
  for (const auto &[name, t] : tensors) {
    Napi::Object e = Napi::Object::New(env);
    e.Set("name", name);
    e.Set("bytes", static_cast<double>(ggml_nbytes(t)));
    ggml_backend_buffer_type_t buft = t->buffer != nullptr ? ggml_backend_buffer_get_type(t->buffer) : nullptr;
    e.Set("bufferType", buft != nullptr ? ggml_backend_buft_name(buft) : "none");
    ggml_backend_dev_t dev = buft != nullptr ? ggml_backend_buft_get_device(buft) : nullptr;
    // ggml's plain and mapped CPU buffer types have no device
    const bool host = dev == nullptr || ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU;
    e.Set("device", host ? std::string("CPU") : std::string(ggml_backend_dev_name(dev)));
    list.Set(i++, e);
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("tensors", list);
  return o;
}

Napi::Value Model::Dispose(const Napi::CallbackInfo &info) {
  handle_.reset();
  return info.Env().Undefined();
}

}  // namespace llamux
