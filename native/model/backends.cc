#include "model/backends.h"

#include <ggml-backend.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#ifndef _WIN32
#include <dlfcn.h>
#else
#include <windows.h>
#endif

namespace llamux {

namespace fs = std::filesystem;

namespace {

#ifndef _WIN32
constexpr const char *kPrefix = "libggml-";
constexpr const char *kExt = ".so";  // CMake MODULE libraries end in .so on macOS too
#else
constexpr const char *kPrefix = "ggml-";
constexpr const char *kExt = ".dll";
#endif

// The folder llamux.node was loaded from (not the executable's, which is node's).
fs::path AddonDirectory() {
#ifndef _WIN32
  Dl_info info{};
  if (dladdr(reinterpret_cast<void *>(&LoadBackends), &info) != 0 && info.dli_fname != nullptr) {
    return fs::path(info.dli_fname).parent_path();
  }
  return {};
#else
  HMODULE mod = nullptr;
  if (GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                         reinterpret_cast<LPCWSTR>(&LoadBackends), &mod)) {
    wchar_t buf[4096];
    DWORD n = GetModuleFileNameW(mod, buf, 4096);
    if (n > 0 && n < 4096) return fs::path(std::wstring(buf, n)).parent_path();
  }
  return {};
#endif
}

// ggml_backend_score of a CPU variant library: 0 when this CPU cannot run it.
int ScoreOf(const fs::path &file) {
#ifndef _WIN32
  void *h = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return -1;
  using score_t = int (*)();
  auto fn = reinterpret_cast<score_t>(dlsym(h, "ggml_backend_score"));
  int s = fn != nullptr ? fn() : -1;
  dlclose(h);
  return s;
#else
  HMODULE h = LoadLibraryW(file.c_str());
  if (h == nullptr) return -1;
  using score_t = int (*)();
  auto fn = reinterpret_cast<score_t>(GetProcAddress(h, "ggml_backend_score"));
  int s = fn != nullptr ? fn() : -1;
  FreeLibrary(h);
  return s;
#endif
}

void Load(const fs::path &dir, BackendReport *r) {
  r->buildKind = "variants";
  r->directory = dir.string();
  const std::string prefix = kPrefix;
  const std::string cpuPrefix = prefix + "cpu-";
  std::vector<std::pair<std::string, fs::path>> cpu;  // variant, file
  std::vector<fs::path> others;
  std::error_code ec;
  for (fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() + 3 || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (it->path().extension() != kExt) continue;
    if (name.compare(0, cpuPrefix.size(), cpuPrefix) == 0) {
      cpu.emplace_back(name.substr(cpuPrefix.size(), name.size() - cpuPrefix.size() - std::string(kExt).size()),
                       it->path());
    } else if (name != prefix + "base" + kExt && name.find("llamux-") == std::string::npos) {
      others.push_back(it->path());  // cuda, vulkan, metal, rpc, ...
    }
  }
  if (ec) {
    r->error = "cannot list " + dir.string() + ": " + ec.message();
    return;
  }
  std::sort(cpu.begin(), cpu.end());
  std::sort(others.begin(), others.end());
  // GPU backends from packages outside this folder (@llamux/<platform>-vulkan, ...): src/native/binding.ts
  // names them after a child process has loaded them without crashing. They resolve
  // libllamux-ggml-base by its soname, already loaded from this folder.
  if (const char *extra = std::getenv("LLAMUX_BACKEND_FILES"); extra != nullptr && *extra != '\0') {
#ifndef _WIN32
    constexpr char kSep = ':';
#else
    constexpr char kSep = ';';
#endif
    std::vector<fs::path> files;
    for (std::string list = extra; !list.empty();) {
      size_t end = list.find(kSep);
      std::string item = list.substr(0, end);
      if (!item.empty()) files.emplace_back(item);
      list = end == std::string::npos ? std::string() : list.substr(end + 1);
    }
    others.insert(others.begin(), files.begin(), files.end());
  }
  // GPU and RPC backends first: llama.cpp orders devices by registration.
  for (const auto &file : others) {
    if (ggml_backend_load(file.string().c_str()) != nullptr) r->loaded.push_back(file.filename().string());
  }
  const char *forced = std::getenv("LLAMUX_CPU_VARIANT");
  int best = 0;
  const fs::path *bestFile = nullptr;
  for (const auto &[variant, file] : cpu) {
    int s = ScoreOf(file);
    r->available.push_back(variant + ":" + std::to_string(s));
    if (forced != nullptr && *forced != '\0') {
      if (variant == forced && s > 0) { best = s; bestFile = &file; r->cpuVariant = variant; }
    } else if (s > best) {
      best = s;
      bestFile = &file;
      r->cpuVariant = variant;
    }
  }
  if (bestFile == nullptr) {
    r->error = cpu.empty() ? "no CPU backend (" + cpuPrefix + "*" + kExt + ") in " + dir.string()
               : forced != nullptr && *forced != '\0'
                   ? std::string("LLAMUX_CPU_VARIANT=") + forced + " is not among the variants this CPU runs"
                   : "none of the CPU backends in " + dir.string() + " runs on this CPU";
    r->cpuVariant.clear();
    return;
  }
  if (ggml_backend_load(bestFile->string().c_str()) == nullptr) {
    r->error = "failed to load " + bestFile->string();
    r->cpuVariant.clear();
    return;
  }
  r->loaded.push_back(bestFile->filename().string());
}

}  // namespace

const BackendReport &LoadBackends() {
  static BackendReport report;
  static std::once_flag once;
  std::call_once(once, [] {
#ifdef LLAMUX_BACKEND_DL
    fs::path dir = AddonDirectory();
    if (dir.empty()) {
      report.buildKind = "variants";
      report.error = "cannot tell which folder llamux.node was loaded from";
      return;
    }
    Load(dir, &report);
#else
    report.buildKind = "native";
    report.cpuVariant = "native";
#endif
  });
  return report;
}

}  // namespace llamux
