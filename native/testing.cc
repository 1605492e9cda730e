#include "testing.h"

#include "napi_util.h"
#include "reuse_planner.h"

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

}  // namespace

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Value t = exports.Get("testing");
  Napi::Object testing = t.IsObject() ? t.As<Napi::Object>() : Napi::Object::New(env);
  testing.Set("planReuse", Napi::Function::New(env, PlanReuseHook, "planReuse"));
  exports.Set("testing", testing);
}

}  // namespace llamux::testing
