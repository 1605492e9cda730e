#include "testing/logits_tap.h"

#include <napi.h>

#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "testing/testing.h"

namespace llamux::logits_tap {

namespace {
std::atomic<bool> on{false};
std::mutex mu;
std::map<std::pair<uint32_t, int32_t>, std::vector<float>> records;
}  // namespace

bool On() { return on.load(std::memory_order_relaxed); }

void Record(uint32_t seed, int32_t step, const float *logits, int32_t n) {
  if (logits == nullptr || n <= 0) return;
  std::lock_guard<std::mutex> lock(mu);
  records.emplace(std::make_pair(seed, step), std::vector<float>(logits, logits + n));
}

}  // namespace llamux::logits_tap

namespace llamux::testing {

// testing.logitsTap(on): turns the tap on or off and clears what it holds.
// testing.takeLogits() -> [{ seed, step, logits: Float32Array }], clearing them.
void InitLogitsTap(Napi::Object testing) {
  Napi::Env env = testing.Env();
  testing.Set("logitsTap", Napi::Function::New(env, [](const Napi::CallbackInfo &info) {
    std::lock_guard<std::mutex> lock(logits_tap::mu);
    logits_tap::records.clear();
    logits_tap::on.store(info.Length() > 0 && info[0].ToBoolean().Value());
    return info.Env().Undefined();
  }, "logitsTap"));
  testing.Set("takeLogits", Napi::Function::New(env, [](const Napi::CallbackInfo &info) {
    Napi::Env e = info.Env();
    std::lock_guard<std::mutex> lock(logits_tap::mu);
    Napi::Array out = Napi::Array::New(e, logits_tap::records.size());
    uint32_t i = 0;
    for (auto &[key, v] : logits_tap::records) {
      Napi::Object o = Napi::Object::New(e);
      o.Set("seed", Napi::Number::New(e, key.first));
      o.Set("step", Napi::Number::New(e, key.second));
      Napi::Float32Array arr = Napi::Float32Array::New(e, v.size());
      std::copy(v.begin(), v.end(), arr.Data());
      o.Set("logits", arr);
      out.Set(i++, o);
    }
    logits_tap::records.clear();
    return out;
  }, "takeLogits"));
}

}  // namespace llamux::testing
