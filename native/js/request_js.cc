// JS objects to native request fields: readers of required keys (see request_js.h).
#include "js/request_js.h"

#include <algorithm>
#include <cmath>

#include "engine/errors.h"
#include "js/napi_util.h"

namespace llamux {

// Readers of required keys. The TS mappers (src/native/request.ts) send every key, so a
// missing or mistyped one is a bug between our own layers: a TypeError naming the key.
[[noreturn]] void MissingKey(Napi::Env env, const char *key, const char *expected) {
  throw Napi::TypeError::New(env, std::string("Expected key \"") + key + "\" to be " + expected);
}
bool RequireBool(Napi::Env env, const Napi::Object &o, const char *key) {
  Napi::Value v = o.Get(key);
  if (!v.IsBoolean()) MissingKey(env, key, "a boolean");
  return v.As<Napi::Boolean>().Value();
}
double RequireNumber(Napi::Env env, const Napi::Object &o, const char *key) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) MissingKey(env, key, "a number");
  return v.As<Napi::Number>().DoubleValue();
}
int64_t RequireInt(Napi::Env env, const Napi::Object &o, const char *key) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) MissingKey(env, key, "a number");
  return v.As<Napi::Number>().Int64Value();
}
std::string RequireString(Napi::Env env, const Napi::Object &o, const char *key) {
  Napi::Value v = o.Get(key);
  if (!v.IsString()) MissingKey(env, key, "a string");
  return v.As<Napi::String>().Utf8Value();
}
Napi::Int32Array RequireInt32Array(Napi::Env env, const Napi::Object &o, const char *key) {
  Napi::Value v = o.Get(key);
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) MissingKey(env, key, "an Int32Array");
  return v.As<Napi::Int32Array>();
}
Napi::Float32Array RequireFloat32Array(Napi::Env env, const Napi::Object &o, const char *key) {
  Napi::Value v = o.Get(key);
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) MissingKey(env, key, "a Float32Array");
  return v.As<Napi::Float32Array>();
}
// A required Int32Array of token ids, each checked against the vocabulary.
void ReadVocabTokens(Napi::Env env, const Napi::Object &o, const char *key, int32_t nVocab, std::vector<llama_token> *dst) {
  Napi::Int32Array a = RequireInt32Array(env, o, key);
  dst->assign(a.Data(), a.Data() + a.ElementLength());
  for (size_t i = 0; i < dst->size(); i++) {
    if ((*dst)[i] < 0 || (*dst)[i] >= nVocab) throw Napi::RangeError::New(env, std::string(key) + ": token outside the vocabulary");
  }
}

// `textDrop`: token ids, sequences separated by -1.
void ReadDropTokens(Napi::Env env, const Napi::Object &o, int32_t nVocab, std::vector<llama_token> *dst) {
  Napi::Int32Array a = RequireInt32Array(env, o, "textDrop");
  dst->assign(a.Data(), a.Data() + a.ElementLength());
  for (llama_token t : *dst) {
    if (t < -1 || t >= nVocab) throw Napi::RangeError::New(env, "textDrop: token outside the vocabulary");
  }
}

void ReadSampling(Napi::Env env, const Napi::Object &o, SamplerParams &s, int32_t nVocab) {
  s.temperature = static_cast<float>(RequireNumber(env, o, "temperature"));
  s.topK = static_cast<int32_t>(RequireInt(env, o, "topK"));
  s.topP = static_cast<float>(RequireNumber(env, o, "topP"));
  s.minP = static_cast<float>(RequireNumber(env, o, "minP"));
  s.typicalP = static_cast<float>(RequireNumber(env, o, "typicalP"));
  s.repeatPenalty = static_cast<float>(RequireNumber(env, o, "repeatPenalty"));
  s.frequencyPenalty = static_cast<float>(RequireNumber(env, o, "frequencyPenalty"));
  s.presencePenalty = static_cast<float>(RequireNumber(env, o, "presencePenalty"));
  s.penaltyLastN = static_cast<int32_t>(RequireInt(env, o, "penaltyLastN"));
  s.seed = static_cast<uint32_t>(std::fmod(RequireNumber(env, o, "seed"), 4294967296.0));
  s.grammar = RequireString(env, o, "grammar");
  s.grammarRoot = RequireString(env, o, "grammarRoot");
  Napi::Int32Array toks = RequireInt32Array(env, o, "logitBiasTokens");
  Napi::Value lv = o.Get("logitBiasValues");
  if (!lv.IsTypedArray() || lv.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) MissingKey(env, "logitBiasValues", "a Float32Array");
  Napi::Float32Array vals = lv.As<Napi::Float32Array>();
  size_t n = std::min(toks.ElementLength(), vals.ElementLength());
  for (size_t i = 0; i < n; i++) {
    if (toks[i] < 0 || toks[i] >= nVocab) {
      ThrowCoded(env, ErrorCode::InvalidArgument, "logitBias token " + std::to_string(toks[i]) + " is outside the vocabulary");
    }
    s.logitBias.emplace_back(toks[i], vals[i]);
  }
}

}  // namespace llamux
