#include "media/media_js.h"

#include <algorithm>
#include <string>
#include <thread>

#include <mtmd-helper.h>
#include <mtmd.h>

#include "js/addon.h"
#include "js/napi_util.h"
#include "media/media_ids.h"
#include "model/model.h"

namespace llamux::media {

namespace {

const napi_type_tag kMediaTag = {0x6c6c616d75786d65ULL, 0x6469614c69737431ULL};

// The chunks of one tokenized prompt, held by a JS External until the request is submitted.
struct MediaList {
  std::vector<MediaChunkPtr> chunks;
};

Napi::Object InfoObject(Napi::Env env, const ProjectorInfo &info) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("vision", Napi::Boolean::New(env, info.vision));
  o.Set("audio", Napi::Boolean::New(env, info.audio));
  o.Set("audioSampleRate", Napi::Number::New(env, info.audioSampleRate));
  o.Set("mrope", Napi::Boolean::New(env, info.mrope));
  o.Set("nonCausal", Napi::Boolean::New(env, info.nonCausal));
  o.Set("marker", Napi::String::New(env, info.marker));
  o.Set("fingerprint", Napi::String::New(env, info.fingerprint));
  return o;
}

class ProjectorWorker : public Napi::AsyncWorker {
 public:
  ProjectorWorker(Napi::Env env, std::shared_ptr<ModelHandle> model, std::string path)
      : Napi::AsyncWorker(env, "llamux.loadProjector"), deferred_(Napi::Promise::Deferred::New(env)),
        model_(std::move(model)), path_(std::move(path)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    LogCapture capture;
    const int32_t threads = static_cast<int32_t>(std::max(1u, std::min(8u, std::thread::hardware_concurrency())));
    try {
      projector_ = std::make_shared<Projector>(path_, model_->model, threads);
    } catch (const std::exception &e) {
      std::string why = e.what();
      // libmtmd's reason: its last error line and what follows it (a hint)
      std::string log = capture.Text();
      const size_t err = log.rfind("error: ");
      if (err != std::string::npos) log = log.substr(err + 7);
      for (char &c : log) c = c == '\n' ? ' ' : c;
      while (!log.empty() && log.back() == ' ') log.pop_back();
      if (!log.empty()) why += " (llama.cpp: " + log.substr(0, 400) + ")";
      SetError("Failed to load the projector \"" + path_ + "\": " + why);
    }
  }
  void OnOK() override {
    model_->projector = projector_;
    deferred_.Resolve(InfoObject(Env(), projector_->Info()));
  }
  void OnError(const Napi::Error &e) override {
    deferred_.Reject(CodedError(Env(), ErrorCode::ModelInvalid, e.Message()).Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<ModelHandle> model_;
  std::string path_;
  std::shared_ptr<Projector> projector_;
};

std::shared_ptr<ModelHandle> HandleOf(const Napi::CallbackInfo &info) {
  Model *m = Model::Unwrap(info[0]);
  if (m == nullptr) throw Napi::TypeError::New(info.Env(), "Expected argument 0 (model) to be a native Model");
  return m->Handle(info.Env());
}

// loadProjector(model, path) -> Promise<info>
Napi::Value LoadProjector(const Napi::CallbackInfo &info) {
  LLAMUX_REQUIRE_STRING(info, 1, "path");
  auto *w = new ProjectorWorker(info.Env(), HandleOf(info), info[1].As<Napi::String>().Utf8Value());
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// projectorInfo(model) -> info | null
Napi::Value GetProjectorInfo(const Napi::CallbackInfo &info) {
  auto h = HandleOf(info);
  if (!h->projector) return info.Env().Null();
  return InfoObject(info.Env(), h->projector->Info());
}

// One part of a prompt: text, or encoded media (PNG, JPEG, ... WAV, MP3).
struct MediaInput {
  bool media = false;
  std::string text;
  std::vector<unsigned char> bytes;
};

class TokenizeWorker : public Napi::AsyncWorker {
 public:
  TokenizeWorker(Napi::Env env, std::shared_ptr<ModelHandle> model, std::vector<MediaInput> inputs, bool addSpecial,
                 bool parseSpecial, double maxPixels, double maxAudioSeconds)
      : Napi::AsyncWorker(env, "llamux.tokenizeMedia"), deferred_(Napi::Promise::Deferred::New(env)),
        model_(std::move(model)), inputs_(std::move(inputs)), addSpecial_(addSpecial),
        parseSpecial_(parseSpecial), maxPixels_(maxPixels), maxAudioSeconds_(maxAudioSeconds) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    Projector &proj = *model_->projector;
    mtmd_context *ctx = proj.Ctx();
    std::vector<mtmd_bitmap *> bitmaps;
    auto freeAll = [&] {
      for (auto *b : bitmaps) mtmd_bitmap_free(b);
    };
    std::vector<mtmd_input_text> texts;
    texts.reserve(inputs_.size());
    std::vector<mtmd_input_part> parts;
    for (size_t i = 0; i < inputs_.size(); i++) {
      if (!inputs_[i].media) {
        texts.push_back({inputs_[i].text.c_str(), inputs_[i].text.size(), false, parseSpecial_});
        parts.push_back({&texts.back(), nullptr});
        continue;
      }
      const auto &in = inputs_[i].bytes;
      mtmd_helper_bitmap_wrapper w = mtmd_helper_bitmap_init_from_buf(ctx, in.data(), in.size(), false, mtmd_helper_init_opt_default());
      if (w.bitmap == nullptr) {
        freeAll();
        return Fail(i, "could not be decoded (corrupt, truncated, or not an image or audio format this build reads: PNG, JPEG, BMP, GIF, WAV, MP3, FLAC)");
      }
      mtmd_bitmap *bm = w.bitmap;
      bitmaps.push_back(bm);
      const bool audio = mtmd_bitmap_is_audio(bm);
      if (audio && !proj.Info().audio) {
        freeAll();
        return Fail(i, "is audio, and this projector reads no audio");
      }
      if (!audio && !proj.Info().vision) {
        freeAll();
        return Fail(i, "is an image, and this projector reads no images");
      }
      const double pixels = static_cast<double>(mtmd_bitmap_get_nx(bm)) * mtmd_bitmap_get_ny(bm);
      if (!audio && pixels > maxPixels_) {
        freeAll();
        return Fail(i, "is " + std::to_string(mtmd_bitmap_get_nx(bm)) + "x" + std::to_string(mtmd_bitmap_get_ny(bm)) +
                           " pixels, over maxPixels (" + std::to_string(static_cast<int64_t>(maxPixels_)) + ")");
      }
      // decoded samples (at the projector's rate): the bound for what no header told beforehand
      const int32_t rate = proj.Info().audioSampleRate;
      const double seconds = rate > 0 ? static_cast<double>(mtmd_bitmap_get_nx(bm)) / rate : 0;
      if (audio && seconds > maxAudioSeconds_) {
        freeAll();
        char msg[160];
        snprintf(msg, sizeof(msg), "is %.2f s of audio, over mediaLimits.maxAudioSeconds (%g)", seconds, maxAudioSeconds_);
        return Fail(i, msg);
      }
      // The content key: the projector, the kind and size, the decoded pixels (or samples).
      ContentHash h;
      h.UpdateValue(proj.Key1());
      h.UpdateValue(proj.Key2());
      h.UpdateValue(audio);
      h.UpdateValue(mtmd_bitmap_get_nx(bm));
      h.UpdateValue(mtmd_bitmap_get_ny(bm));
      h.Update(mtmd_bitmap_get_data(bm), mtmd_bitmap_get_n_bytes(bm));
      char id[40];
      snprintf(id, sizeof(id), "%016llx%016llx", static_cast<unsigned long long>(h.a), static_cast<unsigned long long>(h.b));
      mtmd_bitmap_set_id(bm, id);
      keys_.push_back({h.a, h.b, mtmd_bitmap_get_n_bytes(bm), id});
      parts.push_back({nullptr, bm});
    }
    // Parts, not one text with markers: a marker typed in the text stays text.
    std::vector<const mtmd_input_part *> partPtrs;
    for (const auto &part : parts) partPtrs.push_back(&part);
    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    int32_t rc;
    try {
      rc = mtmd_tokenize_from_parts(ctx, chunks, partPtrs.data(), partPtrs.size(), addSpecial_);
    } catch (const std::exception &) {
      rc = -1;
    }
    freeAll();
    if (rc != 0) {
      mtmd_input_chunks_free(chunks);
      return SetError("The media could not be preprocessed for this projector (libmtmd's tokenizer returned " + std::to_string(rc) + ")");
    }
    // An image is one chunk; an audio clip is one per 30 s window (Whisper) or so, each carrying
    // its part's id: the chunks of a part follow each other, and `window` tells them apart.
    size_t mediaIndex = 0, window = 0;
    bool textSince = true;
    for (size_t c = 0; c < mtmd_input_chunks_size(chunks); c++) {
      const mtmd_input_chunk *ch = mtmd_input_chunks_get(chunks, c);
      const auto type = mtmd_input_chunk_get_type(ch);
      if (type == MTMD_INPUT_CHUNK_TYPE_TEXT) {
        size_t n = 0;
        const llama_token *t = mtmd_input_chunk_get_tokens_text(ch, &n);
        tokens_.insert(tokens_.end(), t, t + n);
        textSince = true;
        continue;
      }
      const char *chunkId = mtmd_input_chunk_get_id(ch);
      const bool sameMedium = type == MTMD_INPUT_CHUNK_TYPE_AUDIO && mediaIndex > 0 && !textSince && chunkId != nullptr &&
                              keys_[mediaIndex - 1].id == chunkId;
      textSince = false;
      if (sameMedium) {
        window++;
      } else {
        window = 0;
        if (mediaIndex >= keys_.size()) {
          mtmd_input_chunks_free(chunks);
          return SetError("libmtmd returned more media chunks than media parts");
        }
        mediaIndex++;
      }
      const Key &k = keys_[mediaIndex - 1];
      auto mc = std::make_shared<MediaChunk>();
      mc->chunk = mtmd_input_chunk_copy(ch);
      mc->audio = type == MTMD_INPUT_CHUNK_TYPE_AUDIO;
      mc->bytes = k.bytes;
      const size_t n = mtmd_input_chunk_get_n_tokens(ch);
      mc->ids.reserve(n);
      // a later window of a clip: the same content key, moved by the window's index
      const uint64_t wa = window == 0 ? k.a : Mix64(k.a ^ (0xa0761d6478bd642fULL * window));
      for (size_t i = 0; i < n; i++) mc->ids.push_back(MediaTokenId(wa, k.b, i));
      tokens_.insert(tokens_.end(), mc->ids.begin(), mc->ids.end());
      proj.Remember(mc);
      list_.chunks.push_back(std::move(mc));
    }
    mtmd_input_chunks_free(chunks);
  }

  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object out = Napi::Object::New(env);
    Napi::Int32Array toks = Napi::Int32Array::New(env, tokens_.size());
    std::copy(tokens_.begin(), tokens_.end(), toks.Data());
    out.Set("tokens", toks);
    auto ext = Napi::External<MediaList>::New(env, new MediaList(std::move(list_)), [](Napi::Env, MediaList *l) { delete l; });
    ext.TypeTag(&kMediaTag);
    out.Set("media", ext);
    Napi::Array runs = Napi::Array::New(env);
    uint32_t k = 0;
    // where each media run starts and its length, in prompt order
    const auto &chunks = ext.Data()->chunks;
    size_t from = 0;
    for (const auto &c : chunks) {
      auto it = std::search(tokens_.begin() + static_cast<std::ptrdiff_t>(from), tokens_.end(), c->ids.begin(), c->ids.end());
      const size_t at = static_cast<size_t>(it - tokens_.begin());
      runs.Set(k++, Napi::Number::New(env, static_cast<double>(at)));
      runs.Set(k++, Napi::Number::New(env, static_cast<double>(c->ids.size())));
      from = at + c->ids.size();
    }
    out.Set("runs", runs);
    deferred_.Resolve(out);
  }
  void OnError(const Napi::Error &e) override {
    Napi::Error err = CodedError(Env(), ErrorCode::InvalidArgument, e.Message());
    if (part_ >= 0) err.Set("part", Napi::Number::New(Env(), part_));
    deferred_.Reject(err.Value());
  }

 private:
  struct Key {
    uint64_t a, b;
    size_t bytes;
    std::string id;
  };
  void Fail(size_t i, const std::string &why) {
    part_ = static_cast<int32_t>(i);
    SetError("Prompt part " + std::to_string(i) + " " + why);
  }
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<ModelHandle> model_;
  std::vector<MediaInput> inputs_;
  bool addSpecial_, parseSpecial_;
  double maxPixels_, maxAudioSeconds_;
  std::vector<Key> keys_;
  std::vector<llama_token> tokens_;
  MediaList list_;
  int32_t part_ = -1;
};

// tokenizeMedia(model, parts: Array<string | Uint8Array>, addSpecial, parseSpecial, maxPixels, maxAudioSeconds)
//   -> Promise<{ tokens: Int32Array, media: External, runs: number[] (start, length)... }>
Napi::Value TokenizeMedia(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = HandleOf(info);
  if (!h->projector) ThrowCoded(env, ErrorCode::Unsupported, "The model was loaded without a projector: load it with { projector } to use media");
  if (info.Length() < 2 || !info[1].IsArray()) throw Napi::TypeError::New(env, "Expected argument 1 (parts) to be an array");
  Napi::Array arr = info[1].As<Napi::Array>();
  std::vector<MediaInput> inputs(arr.Length());
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Value v = arr.Get(i);
    if (v.IsString()) {
      inputs[i].text = v.As<Napi::String>().Utf8Value();
      continue;
    }
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
      throw Napi::TypeError::New(env, "Expected part " + std::to_string(i) + " to be a string or a Uint8Array");
    }
    Napi::Uint8Array u = v.As<Napi::Uint8Array>();
    inputs[i].media = true;
    inputs[i].bytes.assign(u.Data(), u.Data() + u.ElementLength());
  }
  const bool addSpecial = info[2].ToBoolean();
  const bool parseSpecial = info[3].ToBoolean();
  LLAMUX_REQUIRE_NUMBER(info, 4, "maxPixels");
  LLAMUX_REQUIRE_NUMBER(info, 5, "maxAudioSeconds");
  auto *w = new TokenizeWorker(env, h, std::move(inputs), addSpecial, parseSpecial, info[4].As<Napi::Number>().DoubleValue(),
                               info[5].As<Napi::Number>().DoubleValue());
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// Tests only: the embeddings the projector computes for one encoded image (or clip), as the
// engine would decode them: mediaEmbeddings(model, bytes) -> Promise<Float32Array> (tokens x n_embd).
class EmbeddingsWorker : public Napi::AsyncWorker {
 public:
  EmbeddingsWorker(Napi::Env env, std::shared_ptr<ModelHandle> model, std::vector<unsigned char> bytes)
      : Napi::AsyncWorker(env, "llamux.mediaEmbeddings"), deferred_(Napi::Promise::Deferred::New(env)), model_(std::move(model)),
        bytes_(std::move(bytes)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override {
    Projector &proj = *model_->projector;
    mtmd_helper_bitmap_wrapper w = mtmd_helper_bitmap_init_from_buf(proj.Ctx(), bytes_.data(), bytes_.size(), false, mtmd_helper_init_opt_default());
    if (w.bitmap == nullptr) return SetError("the media could not be decoded");
    mtmd_input_part part{nullptr, w.bitmap};
    const mtmd_input_part *parts[] = {&part};
    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    const int32_t rc = mtmd_tokenize_from_parts(proj.Ctx(), chunks, parts, 1, false);
    mtmd_bitmap_free(w.bitmap);
    for (size_t c = 0; rc == 0 && c < mtmd_input_chunks_size(chunks); c++) {
      const mtmd_input_chunk *ch = mtmd_input_chunks_get(chunks, c);
      if (mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_TEXT) continue;
      MediaChunk mc;
      mc.chunk = mtmd_input_chunk_copy(ch);
      mc.ids.resize(mtmd_input_chunk_get_n_tokens(ch));
      std::string error;
      if (!proj.Encode(mc, &embd_, &error)) SetError(error);
      break;
    }
    mtmd_input_chunks_free(chunks);
    if (rc != 0) SetError("libmtmd could not tokenize the media");
  }
  void OnOK() override {
    Napi::Float32Array out = Napi::Float32Array::New(Env(), embd_.size());
    std::copy(embd_.begin(), embd_.end(), out.Data());
    deferred_.Resolve(out);
  }
  void OnError(const Napi::Error &e) override { deferred_.Reject(CodedError(Env(), ErrorCode::InvalidArgument, e.Message()).Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<ModelHandle> model_;
  std::vector<unsigned char> bytes_;
  std::vector<float> embd_;
};

Napi::Value MediaEmbeddings(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = HandleOf(info);
  if (!h->projector) ThrowCoded(env, ErrorCode::Unsupported, "The model was loaded without a projector");
  if (info.Length() < 2 || !info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw Napi::TypeError::New(env, "Expected argument 1 (media) to be a Uint8Array");
  }
  Napi::Uint8Array u = info[1].As<Napi::Uint8Array>();
  auto *w = new EmbeddingsWorker(env, h, std::vector<unsigned char>(u.Data(), u.Data() + u.ElementLength()));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// mediaHeld(model, tokens: Int32Array) -> boolean: whether the projector still holds every media
// run of these tokens (touching each as used). A caller that kept the tokens of an image it saw
// before (keyed by the image's bytes) reuses them only while the engine can still find the
// media: a request with a run the projector dropped is refused at submit.
Napi::Value MediaHeld(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = HandleOf(info);
  if (info.Length() < 2 || !info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw Napi::TypeError::New(env, "Expected argument 1 (tokens) to be an Int32Array");
  }
  if (!h->projector) return Napi::Boolean::New(env, false);
  Napi::Int32Array a = info[1].As<Napi::Int32Array>();
  const llama_token *t = a.Data();
  const size_t n = a.ElementLength();
  for (size_t i = 0; i < n;) {
    if (!IsMediaToken(t[i])) {
      i++;
      continue;
    }
    MediaChunkPtr c = h->projector->Find(t + i, n - i);
    if (!c) return Napi::Boolean::New(env, false);
    i += c->ids.size();
  }
  return Napi::Boolean::New(env, true);
}

}  // namespace

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("mediaHeld", Napi::Function::New(env, MediaHeld, "mediaHeld"));
  exports.Set("mediaEmbeddings", Napi::Function::New(env, MediaEmbeddings, "mediaEmbeddings"));
  exports.Set("loadProjector", Napi::Function::New(env, LoadProjector, "loadProjector"));
  exports.Set("projectorInfo", Napi::Function::New(env, GetProjectorInfo, "projectorInfo"));
  exports.Set("tokenizeMedia", Napi::Function::New(env, TokenizeMedia, "tokenizeMedia"));
  exports.Set("mediaMarker", Napi::String::New(env, mtmd_default_marker()));
}

std::vector<MediaChunkPtr> ReadRequestMedia(Napi::Env env, Napi::Value v) {
  if (!v.IsExternal() || !v.As<Napi::Object>().CheckTypeTag(&kMediaTag)) {
    ThrowCoded(env, ErrorCode::InvalidArgument, "media: expected the media value of tokenizeMedia");
  }
  return v.As<Napi::External<MediaList>>().Data()->chunks;
}

void CheckPromptMedia(Napi::Env env, const std::vector<llama_token> &prompt, const ModelHandle &model,
                      std::vector<MediaChunkPtr> *media) {
  for (size_t i = 0; i < prompt.size();) {
    const llama_token t = prompt[i];
    if (t >= 0 && t < model.n_vocab) {
      i++;
      continue;
    }
    if (!IsMediaToken(t)) {
      ThrowCoded(env, ErrorCode::InvalidArgument, "Prompt token " + std::to_string(t) + " at index " + std::to_string(i) +
                                                      " is outside the vocabulary");
    }
    MediaChunkPtr found;
    for (const auto &c : *media) {
      if (c->ids.size() <= prompt.size() - i && std::equal(c->ids.begin(), c->ids.end(), prompt.begin() + static_cast<std::ptrdiff_t>(i))) {
        found = c;
        break;
      }
    }
    if (!found && model.projector) {
      found = model.projector->Find(prompt.data() + i, prompt.size() - i);
      if (found) media->push_back(found);  // held by the request from here on
    }
    if (found && i + found->ids.size() == prompt.size()) {
      ThrowCoded(env, ErrorCode::InvalidArgument, "The prompt ends with media: text must follow the last image or audio clip");
    }
    if (!found) {
      ThrowCoded(env, ErrorCode::InvalidArgument,
                 "Prompt token " + std::to_string(t) + " at index " + std::to_string(i) +
                     (model.projector ? " is media this projector no longer holds (send the image again)" : " is outside the vocabulary"));
    }
    i += found->ids.size();
  }
}

}  // namespace llamux::media
