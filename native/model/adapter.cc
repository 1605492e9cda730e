#include "model/adapter.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "kv/hash.h"

namespace llamux {

namespace {
std::atomic<int32_t> g_nextAdapterId{1};
}  // namespace

LoadedAdapter AdapterRegistry::Add(llama_adapter_lora *lora, std::string path, std::string fingerprint) {
  LoadedAdapter a;
  a.id = g_nextAdapterId.fetch_add(1);
  a.lora = lora;
  a.path = std::move(path);
  a.fingerprint = std::move(fingerprint);
  std::lock_guard<std::mutex> lk(mu_);
  adapters_.push_back(a);
  return a;
}

bool AdapterRegistry::Find(int32_t id, LoadedAdapter *out) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto &a : adapters_) {
    if (a.id == id) {
      *out = a;
      return true;
    }
  }
  return false;
}

bool AdapterSet::Make(const AdapterRegistry &registry, const int32_t *ids, const float *scales, size_t n, AdapterSet *out,
                      std::string *error) {
  std::vector<std::pair<int32_t, LoadedAdapter>> picked;
  std::vector<float> kept;
  for (size_t i = 0; i < n; i++) {
    LoadedAdapter a;
    if (!registry.Find(ids[i], &a)) {
      *error = "adapter " + std::to_string(ids[i]) + " was not loaded by this context's model";
      return false;
    }
    if (!std::isfinite(scales[i])) {
      *error = "the scale of adapter " + std::to_string(ids[i]) + " is not a finite number";
      return false;
    }
    for (const auto &p : picked) {
      if (p.first == ids[i]) {
        *error = "adapter " + std::to_string(ids[i]) + " is listed twice";
        return false;
      }
    }
    picked.emplace_back(ids[i], a);
    kept.push_back(scales[i]);
  }
  std::vector<size_t> order(picked.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return picked[x].first < picked[y].first; });
  AdapterSet s;
  Hash128 h;
  for (size_t i : order) {
    if (kept[i] == 0.0f) continue;  // llama.cpp skips it: the base model's computation
    s.loras.push_back(picked[i].second.lora);
    s.scales.push_back(kept[i]);
    h.UpdateString(picked[i].second.fingerprint);
    h.UpdateValue(kept[i]);
  }
  if (!s.loras.empty()) s.key = "lora:" + h.Hex();
  *out = std::move(s);
  return true;
}

std::string AdapterScope(const std::string &cacheScope, const AdapterSet &set) {
  if (set.Empty()) return cacheScope;
  // a separator no zod-validated scope can hold on its own keeps (scope, set) pairs apart
  return cacheScope + '\x1f' + set.key;
}

bool ApplyAdapters(llama_context *ctx, const AdapterSet &set) {
  // llama.cpp takes non-const arrays but only reads them
  std::vector<llama_adapter_lora *> loras = set.loras;
  std::vector<float> scales = set.scales;
  try {
    return llama_set_adapters_lora(ctx, loras.empty() ? nullptr : loras.data(), loras.size(),
                                   scales.empty() ? nullptr : scales.data()) == 0;
  } catch (const std::exception &) {
    return false;
  }
}

std::string AdapterFingerprint(const std::string &path, const llama_adapter_lora *lora) {
  Hash128 h;
  FILE *f = fopen(path.c_str(), "rb");
  if (f != nullptr) {
    if (fseeko(f, 0, SEEK_END) == 0) {
      const int64_t size = ftello(f);
      h.UpdateValue(size);
      std::vector<uint8_t> buf(4096);
      const int kSamples = 64;
      if (size <= int64_t(kSamples) * 4096) {
        if (fseeko(f, 0, SEEK_SET) == 0) {
          size_t n;
          while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) h.Update(buf.data(), n);
        }
      } else {
        for (int i = 0; i < kSamples; i++) {
          int64_t off = (size - 4096) * i / (kSamples - 1);
          if (fseeko(f, off, SEEK_SET) != 0) break;
          size_t n = fread(buf.data(), 1, buf.size(), f);
          h.Update(buf.data(), n);
        }
      }
    }
    fclose(f);
  }
  char key[256];
  std::vector<char> val(1024);
  const int32_t n = llama_adapter_meta_count(lora);
  for (int32_t i = 0; i < n; i++) {
    if (llama_adapter_meta_key_by_index(lora, i, key, sizeof(key)) < 0) continue;
    int32_t len = llama_adapter_meta_val_str_by_index(lora, i, val.data(), val.size());
    h.UpdateString(key);
    if (len > 0) h.Update(val.data(), std::min<size_t>(static_cast<size_t>(len), val.size()));
  }
  return h.Hex();
}

}  // namespace llamux

namespace llamux {
std::shared_mutex &AdapterLoadMutex() {
  static std::shared_mutex mu;
  return mu;
}
}  // namespace llamux

namespace llamux {
llama_context *InitContext(llama_model *model, const llama_context_params &params) {
  std::shared_lock<std::shared_mutex> lk(AdapterLoadMutex());
  return llama_init_from_model(model, params);
}
}  // namespace llamux
