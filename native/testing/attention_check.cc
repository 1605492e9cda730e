// Test hook: ggml's CPU flash attention (the kernel llama.cpp runs for the loaded CPU variant,
// with llamux's patches) against an exact double-precision attention and against ggml's own
// reference kernel, on random Q/K/V and the mask shapes llama.cpp builds (one prompt, several
// sequences in a unified KV, ALiBi, masked holes, an idle session's cells ahead of a short
// request, fewer visible cells than threads). Exported as testing.flashAttentionCheck.
#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/backends.h"
#include "js/napi_util.h"
#include "testing/testing.h"

namespace llamux::testing {

namespace {

struct AttentionShape {
  int nQ, nKv, heads, kvHeads, dk, dv, threads;
  std::string mask;  // none | causal | sequences | alibi | holes | tail | sparse
  float softcap;
  bool kvF32;
  uint32_t seed;
};

// The mask value of query row i for KV cell j (0 visible, -inf masked; ALiBi: -distance).
float MaskValue(const AttentionShape &s, int i, int j) {
  const int pos = s.nKv - s.nQ + i;  // the query's own cell: the prompt's last n_q cells
  if (s.mask == "causal") return j <= pos ? 0.0f : -INFINITY;
  if (s.mask == "alibi") return j <= pos ? -static_cast<float>(pos - j) : -INFINITY;
  if (s.mask == "sequences") return (j % 4 == i % 4 && j <= pos) ? 0.0f : -INFINITY;
  if (s.mask == "tail") return (j >= s.nKv - 96 && j <= pos) ? 0.0f : -INFINITY;  // an idle session's cells first
  if (s.mask == "sparse") return (j == 0 || j == s.nKv / 2) ? 0.0f : -INFINITY;  // fewer visible cells than threads
  if (s.mask == "holes") {
    if (i % 17 == 5) return -INFINITY;               // a row that sees nothing
    if (j >= 64 && j < 192) return -INFINITY;        // two whole KV tiles masked for every row
    return j <= pos ? 0.0f : -INFINITY;
  }
  return 0.0f;
}

struct Checked {
  double kernel = 0, reference = 0, magnitude = 0;
};

Checked Run(const AttentionShape &s) {
  const BackendReport &report = LoadBackends();
  if (!report.error.empty()) throw std::runtime_error(report.error);
  ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  if (dev == nullptr) throw std::runtime_error("no CPU backend");
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
  auto setRef = reinterpret_cast<void (*)(ggml_backend_t, bool)>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_cpu_set_use_ref"));
  auto setThreads = reinterpret_cast<void (*)(ggml_backend_t, int)>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads"));
  if (setRef == nullptr || setThreads == nullptr) throw std::runtime_error("the CPU backend lacks use_ref/n_threads");

  ggml_init_params ip = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), nullptr, true};
  std::unique_ptr<ggml_context, decltype(&ggml_free)> owned(ggml_init(ip), ggml_free);
  ggml_context *ctx = owned.get();
  ggml_type kvType = s.kvF32 ? GGML_TYPE_F32 : GGML_TYPE_F16;
  ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.dk, s.nQ, s.heads, 1);
  ggml_tensor *k = ggml_new_tensor_4d(ctx, kvType, s.dk, s.nKv, s.kvHeads, 1);
  ggml_tensor *v = ggml_new_tensor_4d(ctx, kvType, s.dv, s.nKv, s.kvHeads, 1);
  ggml_tensor *mask = s.mask == "none" ? nullptr : ggml_new_tensor_4d(ctx, GGML_TYPE_F16, s.nKv, s.nQ, 1, 1);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.dk));
  const float maxBias = s.mask == "alibi" ? 8.0f : 0.0f;
  ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, maxBias, s.softcap);
  ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
  ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);

  std::unique_ptr<ggml_backend, decltype(&ggml_backend_free)> backend(ggml_backend_dev_init(dev, nullptr), ggml_backend_free);
  ggml_backend_t be = backend.get();
  if (be == nullptr) throw std::runtime_error("cannot start the CPU backend");
  std::unique_ptr<ggml_backend_buffer, decltype(&ggml_backend_buffer_free)> buf(ggml_backend_alloc_ctx_tensors(ctx, be), ggml_backend_buffer_free);
  if (buf == nullptr) throw std::runtime_error("cannot allocate the attention tensors");
  Checked c;
  std::mt19937 rng(s.seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> qv(static_cast<size_t>(s.dk) * s.nQ * s.heads), kv(static_cast<size_t>(s.dk) * s.nKv * s.kvHeads),
      vv(static_cast<size_t>(s.dv) * s.nKv * s.kvHeads);
  for (auto &x : qv) x = 2.0f * uni(rng);  // wide enough that the softmax is not flat
  for (auto &x : kv) x = ggml_fp16_to_fp32(ggml_fp32_to_fp16(2.0f * uni(rng)));  // values F16 holds exactly
  for (auto &x : vv) x = ggml_fp16_to_fp32(ggml_fp32_to_fp16(uni(rng)));
  auto upload = [](ggml_tensor *t, const std::vector<float> &x) {
    if (t->type == GGML_TYPE_F32) {
      ggml_backend_tensor_set(t, x.data(), 0, x.size() * sizeof(float));
      return;
    }
    std::vector<ggml_fp16_t> h(x.size());
    ggml_fp32_to_fp16_row(x.data(), h.data(), static_cast<int64_t>(x.size()));
    ggml_backend_tensor_set(t, h.data(), 0, h.size() * sizeof(ggml_fp16_t));
  };
  upload(q, qv);
  upload(k, kv);
  upload(v, vv);
  std::vector<float> mv(static_cast<size_t>(s.nKv) * s.nQ);
  for (int i = 0; i < s.nQ; i++) {
    for (int j = 0; j < s.nKv; j++) mv[static_cast<size_t>(i) * s.nKv + j] = MaskValue(s, i, j);
  }
  if (mask != nullptr) upload(mask, mv);

  setThreads(be, s.threads);
  auto compute = [&](bool ref) {
    setRef(be, ref);
    if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) throw std::runtime_error("graph compute failed");
    std::vector<float> r(ggml_nelements(out));
    ggml_backend_tensor_get(out, r.data(), 0, r.size() * sizeof(float));
    return r;
  };
  std::vector<float> got = compute(false);
  std::vector<float> ref = compute(true);

  // Exact attention, in double. The output is [dv, heads, nQ].
  const int perKv = s.heads / s.kvHeads;
  const uint32_t headsLog2 = 1u << static_cast<uint32_t>(std::floor(std::log2(s.heads)));
  const double m0 = std::pow(2.0, -maxBias / headsLog2), m1 = std::pow(2.0, -(maxBias / 2.0) / headsLog2);
  std::vector<double> w(s.nKv), acc(s.dv);
  for (int h = 0; h < s.heads; h++) {
    const int hk = h / perKv;
    const double slope = maxBias > 0 ? (static_cast<uint32_t>(h) < headsLog2 ? std::pow(m0, h + 1) : std::pow(m1, 2 * (h - headsLog2) + 1)) : 1.0;
    for (int i = 0; i < s.nQ; i++) {
      const float *qr = &qv[(static_cast<size_t>(h) * s.nQ + i) * s.dk];
      double mx = -INFINITY;
      for (int j = 0; j < s.nKv; j++) {
        const float *kr = &kv[(static_cast<size_t>(hk) * s.nKv + j) * s.dk];
        double dot = 0;
        for (int d = 0; d < s.dk; d++) dot += static_cast<double>(qr[d]) * kr[d];
        double x = dot * scale;
        if (s.softcap != 0) x = s.softcap * std::tanh(x / s.softcap);
        x += mask != nullptr ? slope * mv[static_cast<size_t>(i) * s.nKv + j] : 0.0;
        w[j] = x;
        mx = std::max(mx, x);
      }
      double sum = 0;
      for (int j = 0; j < s.nKv; j++) {
        w[j] = mx == -INFINITY ? 0.0 : std::exp(w[j] - mx);
        sum += w[j];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = 0; j < s.nKv; j++) {
        if (w[j] == 0) continue;
        const float *vr = &vv[(static_cast<size_t>(hk) * s.nKv + j) * s.dv];
        for (int d = 0; d < s.dv; d++) acc[d] += w[j] * vr[d];
      }
      const size_t o = (static_cast<size_t>(i) * s.heads + h) * s.dv;
      for (int d = 0; d < s.dv; d++) {
        const double exact = sum > 0 ? acc[d] / sum : 0.0;
        c.kernel = std::max(c.kernel, std::fabs(got[o + d] - exact));
        c.reference = std::max(c.reference, std::fabs(ref[o + d] - exact));
        c.magnitude = std::max(c.magnitude, std::fabs(exact));
        if (!std::isfinite(got[o + d])) c.kernel = INFINITY;
      }
    }
  }
  return c;
}

int Int(const Napi::Object &o, const char *key, int def, int min, int max) {
  double v = GetNumber(o, key, def);
  if (!(v >= min && v <= max)) throw std::invalid_argument(std::string(key) + " is out of range");
  return static_cast<int>(v);
}

// flashAttentionCheck({ queries, kv, heads, kvHeads, headDim, valueDim, mask, softcap, kvF32,
// threads, seed }) -> { kernel, reference, magnitude }: the largest absolute error of ggml's
// kernel (as dispatched) and of its reference kernel against exact attention.
Napi::Value FlashAttentionCheckHook(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  LLAMUX_REQUIRE_OBJECT(info, 0, "shape");
  Napi::Object o = info[0].As<Napi::Object>();
  AttentionShape s;
  try {
    s.nQ = Int(o, "queries", 64, 1, 4096);
    s.nKv = Int(o, "kv", 256, 1, 16384);
    s.heads = Int(o, "heads", 4, 1, 64);
    s.kvHeads = Int(o, "kvHeads", s.heads, 1, s.heads);
    s.dk = Int(o, "headDim", 64, 16, 256);
    s.dv = Int(o, "valueDim", s.dk, 16, 256);
    s.threads = Int(o, "threads", 2, 1, 64);
    s.seed = static_cast<uint32_t>(Int(o, "seed", 1, 0, 1 << 30));
    s.softcap = static_cast<float>(GetNumber(o, "softcap", 0));
    s.kvF32 = GetBool(o, "kvF32", false);
    s.mask = o.Has("mask") ? o.Get("mask").ToString().Utf8Value() : "causal";
    if (s.heads % s.kvHeads != 0) throw std::invalid_argument("heads must be a multiple of kvHeads");
    const char *masks[] = {"none", "causal", "sequences", "alibi", "holes", "tail", "sparse"};
    if (std::find(std::begin(masks), std::end(masks), s.mask) == std::end(masks)) {
      throw std::invalid_argument("mask must be none, causal, sequences, alibi, holes, tail or sparse");
    }
    if (s.nQ > s.nKv) throw std::invalid_argument("queries must not exceed kv");
  } catch (const std::invalid_argument &e) {
    throw Napi::RangeError::New(env, e.what());
  }
  Checked c;
  try {
    c = Run(s);
  } catch (const std::exception &e) {
    throw Napi::Error::New(env, std::string("flash attention check failed: ") + e.what());
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("kernel", c.kernel);
  out.Set("reference", c.reference);
  out.Set("magnitude", c.magnitude);
  return out;
}

}  // namespace

void InitAttentionCheck(Napi::Object testing) {
  testing.Set("flashAttentionCheck", Napi::Function::New(testing.Env(), FlashAttentionCheckHook, "flashAttentionCheck"));
}

}  // namespace llamux::testing
