#include "testing/testing.h"

#include <cmath>
#include <exception>

#include "model/model.h"
#include "js/napi_util.h"
#include "kv/reuse_planner.h"
#include "speculative/speculative.h"
#include "model/tokenizer.h"

namespace llamux::testing {

namespace {

const char *SourceKey(ReuseSource s) {
  switch (s) {
    case ReuseSource::None: return "none";
    case ReuseSource::Live: return "live";
    case ReuseSource::Session: return "session";
    case ReuseSource::Shared: return "shared";
    case ReuseSource::Ram: return "ram";
    case ReuseSource::Disk: return "disk";
  }
  return "none";
}

size_t Size(const Napi::Object &o, const char *key) {
  double v = GetNumber(o, key, 0);
  return v > 0 ? static_cast<size_t>(v) : 0;
}

// planReuse(inputs) -> { source, common, shareFrom, readDisk, outcome, tier }
// `kept` (optional) is the prompt tokens kept after trimming, for the outcome.
Napi::Value PlanReuseHook(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  LLAMUX_REQUIRE_OBJECT(info, 0, "inputs");
  Napi::Object o = info[0].As<Napi::Object>();
  ReuseInputs in;
  in.enabled = GetBool(o, "enabled", true);
  in.canTruncate = GetBool(o, "canTruncate", true);
  in.checkpoints = GetBool(o, "checkpoints", false);
  in.unifiedKv = GetBool(o, "unifiedKv", true);
  in.pinned = GetBool(o, "pinned", false);
  in.minGain = static_cast<size_t>(GetNumber(o, "minGain", 8));
  in.promptTokens = Size(o, "promptTokens");
  in.liveTokens = Size(o, "liveTokens");
  in.liveCommon = Size(o, "liveCommon");
  in.hasSession = o.Has("sessionCommon");
  in.sessionTokens = Size(o, "sessionTokens");
  in.sessionCommon = Size(o, "sessionCommon");
  Napi::Value seqs = o.Get("sequenceCommon");
  if (seqs.IsArray()) {
    Napi::Array a = seqs.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); i++) in.sequenceCommon.push_back(static_cast<size_t>(a.Get(i).ToNumber().DoubleValue()));
  }
  in.target = static_cast<int32_t>(GetInt(o, "target", -1));
  in.hasRam = o.Has("ramCommon");
  in.ramCommon = Size(o, "ramCommon");
  in.hasDisk = o.Has("diskCommon");
  in.diskCommon = Size(o, "diskCommon");
  in.diskReady = o.Has("diskReadyCommon");
  in.diskReadyCommon = Size(o, "diskReadyCommon");
  ReusePlan plan = PlanReuse(in);
  size_t kept = o.Has("kept") ? Size(o, "kept") : plan.common;
  Napi::Object out = Napi::Object::New(env);
  out.Set("source", SourceKey(plan.source));
  out.Set("common", static_cast<double>(plan.common));
  out.Set("shareFrom", plan.shareFrom);
  out.Set("readDisk", plan.readDisk);
  out.Set("outcome", ReuseOutcome(plan, in, kept));
  out.Set("tier", kept == 0 ? "" : ReuseSourceName(plan.source));
  return out;
}

// grammarAccepts(model, gbnf, root, tokens) -> { parsed, accepted, complete }: feeds `tokens` to a
// llama.cpp grammar sampler one at a time (a one-candidate apply, then accept); `accepted`
// counts the tokens taken before the first refusal, `complete` says whether the grammar may
// end after all of them (EOS allowed).
Napi::Value GrammarAcceptsHook(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Model *model = info.Length() > 0 ? Model::Unwrap(info[0]) : nullptr;
  if (model == nullptr) throw Napi::TypeError::New(env, "Expected argument 0 (model) to be a Model");
  if (info.Length() < 4 || !info[1].IsString() || !info[2].IsString() || !info[3].IsTypedArray()) {
    throw Napi::TypeError::New(env, "Expected (model, gbnf, root, tokens: Int32Array)");
  }
  std::shared_ptr<ModelHandle> h = model->Handle(env);
  std::string gbnf = info[1].As<Napi::String>().Utf8Value();
  std::string root = info[2].As<Napi::String>().Utf8Value();
  Napi::Int32Array toks = info[3].As<Napi::Int32Array>();
  Napi::Object out = Napi::Object::New(env);
  llama_sampler *g = llama_sampler_init_grammar(h->vocab, gbnf.c_str(), root.c_str());
  out.Set("parsed", Napi::Boolean::New(env, g != nullptr));
  int32_t accepted = 0;
  bool complete = false;
  if (g != nullptr) {
    auto allows = [&](llama_token t) {
      llama_token_data one = {t, 0.0f, 0.0f};
      llama_token_data_array arr = {&one, 1, -1, false};
      llama_sampler_apply(g, &arr);
      return !(std::isinf(one.logit) && one.logit < 0);
    };
    try {
      for (size_t i = 0; i < toks.ElementLength(); i++) {
        llama_token t = toks[i];
        if (t < 0 || t >= h->n_vocab || !allows(t)) break;
        llama_sampler_accept(g, t);
        accepted++;
      }
      if (accepted == static_cast<int32_t>(toks.ElementLength())) complete = allows(llama_vocab_eos(h->vocab));
    } catch (const std::exception &) {
      // a refusal llama.cpp reports by throwing: stop counting there
    }
    llama_sampler_free(g);
  }
  out.Set("accepted", Napi::Number::New(env, accepted));
  out.Set("complete", Napi::Boolean::New(env, complete));
  return out;
}


// tokenizeRaw(model, text, addSpecial, parseSpecial) -> Int32Array: one plain llama_tokenize call,
// the reference the bounded tokenizer is compared with.
// tokenizeBounded(model, text, addSpecial, parseSpecial, pieceBytes) -> Int32Array: the bounded
// tokenizer with a chosen piece size (small pieces put many cuts into short test texts).
Napi::Value TokenizeHook(const Napi::CallbackInfo &info, bool raw) {
  Napi::Env env = info.Env();
  Model *model = info.Length() > 0 ? Model::Unwrap(info[0]) : nullptr;
  if (model == nullptr) throw Napi::TypeError::New(env, "Expected argument 0 (model) to be a Model");
  if (info.Length() < 2 || !info[1].IsString()) throw Napi::TypeError::New(env, "Expected (model, text, addSpecial, parseSpecial)");
  std::shared_ptr<ModelHandle> h = model->Handle(env);
  std::string text = info[1].As<Napi::String>().Utf8Value();
  bool addSpecial = info.Length() > 2 && info[2].ToBoolean().Value();
  bool parseSpecial = info.Length() > 3 && info[3].ToBoolean().Value();
  std::vector<llama_token> out;
  if (raw) {
    if (!WholeTokenize(h->vocab, text, addSpecial, parseSpecial, &out)) throw Napi::Error::New(env, "llama_tokenize failed");
  } else {
    TokenizeOptions o;
    o.addSpecial = addSpecial;
    o.parseSpecial = parseSpecial;
    if (info.Length() > 4 && info[4].IsNumber()) o.pieceBytes = static_cast<size_t>(std::max(1.0, info[4].As<Napi::Number>().DoubleValue()));
    if (BoundedTokenize(h->vocab, h->Tokenizer(), text, o, &out) != TokenizeStatus::Ok) throw Napi::Error::New(env, "bounded tokenize failed");
  }
  Napi::Int32Array arr = Napi::Int32Array::New(env, out.size());
  std::copy(out.begin(), out.end(), arr.Data());
  return arr;
}

// speculativePolicy(draftMax, contextAccepted, contextMisses, agree[], draftModel?) -> { lengths,
// accepted, misses }: one request's draft length at each tick (0: none) when the first agree[t]
// tokens of tick t's draft would stand (n-gram costs, or a draft model's); the context's evidence
// after it. Pauses end in scheduled probes (a draft model's; n-gram probes need the tokens).
Napi::Value SpeculativePolicyHook(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  SpecConfig cfg;
  cfg.draftMax = info[0].As<Napi::Number>().Uint32Value();
  cfg.mode = info.Length() > 4 && info[4].IsBoolean() && info[4].As<Napi::Boolean>().Value() ? SpecMode::Draft : SpecMode::Ngram;
  SpecEvidence context{info[1].As<Napi::Number>().DoubleValue(), info[2].As<Napi::Number>().DoubleValue()};
  Napi::Array agree = info[3].As<Napi::Array>();
  SpecState s;
  Napi::Array lengths = Napi::Array::New(env, agree.Length());
  for (uint32_t t = 0; t < agree.Length(); t++) {
    if (!s.started) spec::Start(s, cfg, context);
    uint32_t k = 0;
    if (s.skip > 0) {
      s.skip--;
    } else {
      k = spec::Decide(s, cfg);
      if (k > 0) spec::Update(s, cfg, context, k, std::min<uint32_t>(k, agree.Get(t).As<Napi::Number>().Uint32Value()));
    }
    lengths.Set(t, Napi::Number::New(env, k));
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("lengths", lengths);
  out.Set("accepted", Napi::Number::New(env, context.accepted));
  out.Set("misses", Napi::Number::New(env, context.misses));
  return out;
}

}  // namespace

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Value t = exports.Get("testing");
  Napi::Object testing = t.IsObject() ? t.As<Napi::Object>() : Napi::Object::New(env);
  testing.Set("planReuse", Napi::Function::New(env, PlanReuseHook, "planReuse"));
  testing.Set("speculativePolicy", Napi::Function::New(env, SpeculativePolicyHook, "speculativePolicy"));
  testing.Set("grammarAccepts", Napi::Function::New(env, GrammarAcceptsHook, "grammarAccepts"));
  testing.Set("tokenizeRaw", Napi::Function::New(env, [](const Napi::CallbackInfo &i) { return TokenizeHook(i, true); }, "tokenizeRaw"));
  testing.Set("tokenizeBounded", Napi::Function::New(env, [](const Napi::CallbackInfo &i) { return TokenizeHook(i, false); }, "tokenizeBounded"));
  InitAttentionCheck(testing);
  InitLogitsTap(testing);
  exports.Set("testing", testing);
}

}  // namespace llamux::testing
