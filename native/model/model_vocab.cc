// Model's vocabulary methods: tokenize (bounded, cancellable: tokenizer.h), detokenize,
// token pieces and attributes, the vocabulary report. Part of the Model class (model.h); the
// load, metadata and lifetime live in model.cc.
#include <vector>

#include "js/addon.h"
#include "engine/errors.h"
#include "model/model.h"
#include "js/napi_util.h"

namespace llamux {

const TokenizerIndex &ModelHandle::Tokenizer() {
  std::call_once(tokOnce_, [this] { tok_ = std::make_unique<TokenizerIndex>(TokenizerIndex::Build(vocab)); });
  return *tok_;
}

namespace {

struct TokenizeArgs {
  std::string text;
  TokenizeOptions opts;
};

// (text, addSpecial, parseSpecial, cancel?: Int32Array(1), maxTokens?: number)
TokenizeArgs ReadTokenizeArgs(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  LLAMUX_REQUIRE_STRING(info, 0, "text");
  TokenizeArgs a;
  a.text = info[0].As<Napi::String>().Utf8Value();
  a.opts.addSpecial = info.Length() > 1 && info[1].ToBoolean().Value();
  a.opts.parseSpecial = info.Length() > 2 && info[2].ToBoolean().Value();
  if (info.Length() > 3 && info[3].IsTypedArray()) {
    Napi::TypedArray t = info[3].As<Napi::TypedArray>();
    if (t.TypedArrayType() != napi_int32_array || t.ElementLength() < 1) throw Napi::TypeError::New(env, "cancel must be an Int32Array of one element");
    a.opts.cancel = t.As<Napi::Int32Array>().Data();
  }
  if (info.Length() > 4 && info[4].IsNumber()) {
    double m = info[4].As<Napi::Number>().DoubleValue();
    if (m > 0) a.opts.maxTokens = static_cast<size_t>(m);
  }
  if (a.text.size() > static_cast<size_t>(INT32_MAX / 4)) ThrowCoded(env, ErrorCode::InvalidArgument, "Text is too long to tokenize");
  return a;
}

bool StatusError(TokenizeStatus st, const TokenizeOptions &o, ErrorCode *code, std::string *message) {
  switch (st) {
    case TokenizeStatus::Ok: return false;
    case TokenizeStatus::Cancelled:
      *code = ErrorCode::Aborted;
      *message = "Tokenization was aborted";
      return true;
    case TokenizeStatus::TooMany:
      *code = ErrorCode::ContextOverflow;
      *message = "The text has more than " + std::to_string(o.maxTokens) + " tokens";
      return true;
    case TokenizeStatus::Failed: break;
  }
  *code = ErrorCode::InvalidArgument;
  *message = "Tokenization failed";
  return true;
}

Napi::Int32Array ToArray(Napi::Env env, const std::vector<llama_token> &out) {
  Napi::Int32Array arr = Napi::Int32Array::New(env, out.size());
  std::copy(out.begin(), out.end(), arr.Data());
  return arr;
}

// Tokenizes on a libuv thread; the cancel flag (shared with JS) stops it between pieces.
class TokenizeWorker : public Napi::AsyncWorker {
 public:
  TokenizeWorker(Napi::Env env, std::shared_ptr<ModelHandle> h, TokenizeArgs args, Napi::Value cancel)
      : Napi::AsyncWorker(env, "llamux.tokenize"), deferred_(Napi::Promise::Deferred::New(env)), h_(std::move(h)), a_(std::move(args)) {
    if (cancel.IsTypedArray()) cancelRef_ = Napi::Persistent(cancel.As<Napi::Int32Array>());
  }
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override {
    TokenizeStatus st = BoundedTokenize(h_->vocab, h_->Tokenizer(), a_.text, a_.opts, &out_);
    if (StatusError(st, a_.opts, &code_, &message_)) SetError(message_);
  }
  void OnOK() override { deferred_.Resolve(ToArray(Env(), out_)); }
  void OnError(const Napi::Error &) override { deferred_.Reject(CodedError(Env(), code_, message_).Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<ModelHandle> h_;
  TokenizeArgs a_;
  Napi::Reference<Napi::Int32Array> cancelRef_;
  std::vector<llama_token> out_;
  ErrorCode code_ = ErrorCode::Internal;
  std::string message_;
};

}  // namespace

// tokenize(text, addSpecial, parseSpecial, cancel?, maxTokens?) -> Int32Array, in bounded
// pieces (see tokenizer.h); the cancel flag can be set by another thread.
Napi::Value Model::Tokenize(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = Handle(env);
  TokenizeArgs a = ReadTokenizeArgs(info);
  std::vector<llama_token> out;
  TokenizeStatus st = BoundedTokenize(h->vocab, h->Tokenizer(), a.text, a.opts, &out);
  ErrorCode code;
  std::string message;
  if (StatusError(st, a.opts, &code, &message)) ThrowCoded(env, code, message);
  return ToArray(env, out);
}

// tokenizeAsync(text, addSpecial, parseSpecial, cancel?, maxTokens?) -> Promise<Int32Array>
Napi::Value Model::TokenizeAsync(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = Handle(env);
  TokenizeArgs a = ReadTokenizeArgs(info);
  auto *worker = new TokenizeWorker(env, h, std::move(a), info.Length() > 3 ? info[3] : env.Undefined());
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

static void CheckTokens(Napi::Env env, const ModelHandle &h, const int32_t *t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (t[i] < 0 || t[i] >= h.n_vocab) {
      ThrowCoded(env, ErrorCode::InvalidArgument, "Token id " + std::to_string(t[i]) + " at index " + std::to_string(i) +
                                              " is outside the vocabulary (0.." + std::to_string(h.n_vocab - 1) + ")");
    }
  }
}

// detokenize(tokens: Int32Array, special: bool) -> string
Napi::Value Model::Detokenize(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = Handle(env);
  LLAMUX_REQUIRE_INT32ARRAY(info, 0, "tokens");
  Napi::Int32Array tokens = info[0].As<Napi::Int32Array>();
  bool special = info.Length() > 1 && info[1].ToBoolean().Value();
  CheckTokens(env, *h, tokens.Data(), tokens.ElementLength());
  const int32_t *data = tokens.Data();
  int32_t count = static_cast<int32_t>(tokens.ElementLength());
  // A leading BOS renders as nothing; skipping it lets llama.cpp drop the space prefix the
  // tokenizer added, so detokenize(tokenize(text)) === text.
  if (!special && count > 0 && data[0] == llama_vocab_bos(h->vocab)) {
    data++;
    count--;
  }
  std::string out;
  out.resize(static_cast<size_t>(count) * 8 + 16);
  int32_t n = llama_detokenize(h->vocab, data, count, out.data(), static_cast<int32_t>(out.size()), false, special);
  if (n < 0) {
    out.resize(static_cast<size_t>(-n));
    n = llama_detokenize(h->vocab, data, count, out.data(), static_cast<int32_t>(out.size()), false, special);
    if (n < 0) ThrowCoded(env, ErrorCode::InvalidArgument, "Detokenization failed");
  }
  out.resize(static_cast<size_t>(n));
  return Napi::String::New(env, out);
}

// tokenPiece(token, special) -> Uint8Array (raw bytes; a piece may be part of a UTF-8 character)
Napi::Value Model::TokenPiece(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = Handle(env);
  LLAMUX_REQUIRE_NUMBER(info, 0, "token");
  int32_t tok = info[0].As<Napi::Number>().Int32Value();
  bool special = info.Length() > 1 && info[1].ToBoolean().Value();
  CheckTokens(env, *h, &tok, 1);
  char buf[256];
  int32_t n = llama_token_to_piece(h->vocab, tok, buf, sizeof(buf), 0, special);
  std::string big;
  const char *src = buf;
  if (n < 0) {
    big.resize(static_cast<size_t>(-n));
    n = llama_token_to_piece(h->vocab, tok, big.data(), static_cast<int32_t>(big.size()), 0, special);
    src = big.data();
    if (n < 0) n = 0;
  }
  Napi::Uint8Array arr = Napi::Uint8Array::New(env, static_cast<size_t>(n));
  std::copy(src, src + n, arr.Data());
  return arr;
}

// tokenInfo(token) -> { text, score, attributes, isEog, isControl }
Napi::Value Model::TokenInfo(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = Handle(env);
  LLAMUX_REQUIRE_NUMBER(info, 0, "token");
  int32_t tok = info[0].As<Napi::Number>().Int32Value();
  CheckTokens(env, *h, &tok, 1);
  Napi::Object o = Napi::Object::New(env);
  const char *text = llama_vocab_get_text(h->vocab, tok);
  o.Set("text", Napi::String::New(env, text != nullptr ? text : ""));
  o.Set("score", llama_vocab_get_score(h->vocab, tok));
  o.Set("attributes", static_cast<double>(llama_vocab_get_attr(h->vocab, tok)));
  o.Set("isEog", llama_vocab_is_eog(h->vocab, tok));
  o.Set("isControl", llama_vocab_is_control(h->vocab, tok));
  return o;
}

Napi::Value Model::VocabInfo(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  auto h = Handle(env);
  const llama_vocab *v = h->vocab;
  Napi::Object o = Napi::Object::New(env);
  o.Set("size", h->n_vocab);
  o.Set("type", static_cast<double>(llama_vocab_type(v)));
  o.Set("bos", llama_vocab_bos(v));
  o.Set("eos", llama_vocab_eos(v));
  o.Set("eot", llama_vocab_eot(v));
  o.Set("sep", llama_vocab_sep(v));
  o.Set("nl", llama_vocab_nl(v));
  o.Set("pad", llama_vocab_pad(v));
  o.Set("addBos", llama_vocab_get_add_bos(v));
  o.Set("addEos", llama_vocab_get_add_eos(v));
  o.Set("addSep", llama_vocab_get_add_sep(v));
  // Fill-in-the-middle tokens, as llama.cpp found them (GGUF keys or the known token texts).
  Napi::Object fim = Napi::Object::New(env);
  fim.Set("prefix", llama_vocab_fim_pre(v));
  fim.Set("suffix", llama_vocab_fim_suf(v));
  fim.Set("middle", llama_vocab_fim_mid(v));
  fim.Set("pad", llama_vocab_fim_pad(v));
  fim.Set("repo", llama_vocab_fim_rep(v));
  fim.Set("sep", llama_vocab_fim_sep(v));
  o.Set("fim", fim);
  // Every end-of-generation token, so JS can tell them apart without a call per token.
  std::vector<int32_t> eog;
  for (int32_t t = 0; t < h->n_vocab; t++) {
    if (llama_vocab_is_eog(v, t)) eog.push_back(t);
  }
  Napi::Int32Array arr = Napi::Int32Array::New(env, eog.size());
  std::copy(eog.begin(), eog.end(), arr.Data());
  o.Set("eogTokens", arr);
  return o;
}

}  // namespace llamux
