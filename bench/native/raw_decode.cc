// The speed limit for any binding: a plain C++ loop over the same static llama.cpp.
// Prefills a prompt of N tokens, then decodes M tokens greedily (end-of-generation tokens
// banned), sampling the same way llamux does (full-vocab candidates + a greedy chain).
// Usage: raw-decode MODEL PROMPT_TOKENS GEN_TOKENS THREADS [SEQUENCES] [SAMPLER] [SUFFIX]
//   SAMPLER: "llamux" (default: full-vocab candidates + logit bias + greedy, as llamux
//            samples) or "plain" (llama_sampler_sample with a greedy chain: the true limit)
//   SUFFIX > 0: after the prompt, time GEN_TOKENS decodes of a SUFFIX-token batch over the
//            prompt's KV (each removed again): small batches over a long KV.
// Prints one JSON line.
#include <ggml-backend.h>
#include <llama.h>

#include <string>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s MODEL PROMPT_TOKENS GEN_TOKENS THREADS [SEQUENCES]\n", argv[0]);
    return 2;
  }
  const char *path = argv[1];
  int nPrompt = atoi(argv[2]);
  int nGen = atoi(argv[3]);
  int threads = atoi(argv[4]);
  int nSeq = argc > 5 ? atoi(argv[5]) : 1;
  bool plain = argc > 6 && std::string(argv[6]) == "plain";
  int nSuffix = argc > 7 ? atoi(argv[7]) : 0;
  llama_log_set(quiet, nullptr);
  llama_backend_init();
#ifdef LLAMUX_BACKEND_DL
  // The CPU backend variants sit next to this executable (build/Release). LLAMUX_CPU_VARIANT
  // forces one, as it does for llamux, so both sides of a benchmark run the same kernels.
  if (const char *v = getenv("LLAMUX_CPU_VARIANT"); v != nullptr && *v != '\0') {
#ifdef LLAMUX_BACKEND_DIR
    std::string dir = std::string(LLAMUX_BACKEND_DIR) + "/";
#else
    std::string exe = argv[0];
    std::string dir = exe.substr(0, exe.find_last_of('/') + 1);
#endif
    if (ggml_backend_load((dir + "libggml-cpu-" + v + ".so").c_str()) == nullptr) {
      fprintf(stderr, "cannot load CPU variant %s\n", v);
      return 1;
    }
  } else {
#ifdef LLAMUX_BACKEND_DIR
    ggml_backend_load_all_from_path(LLAMUX_BACKEND_DIR);  // node-llama-cpp's own CPU variants
#else
    ggml_backend_load_all();
#endif
  }
#endif
  llama_model_params mp = llama_model_default_params();
  llama_model *model = llama_model_load_from_file(path, mp);
  if (!model) {
    fprintf(stderr, "cannot load %s\n", path);
    return 1;
  }
  const llama_vocab *vocab = llama_model_get_vocab(model);
  int nVocab = llama_vocab_n_tokens(vocab);
  llama_context_params cp = llama_context_default_params();
  // LLAMUX_RAW_IDLE_TOKENS=N: a sequence of N tokens sits idle in the unified KV while the
  // measured ones decode (the idle-KV case of the attention suite, without llamux).
  const char *idleEnv = getenv("LLAMUX_RAW_IDLE_TOKENS");
  const int nIdle = idleEnv != nullptr ? atoi(idleEnv) : 0;
  cp.n_ctx = (nPrompt + (nGen > nSuffix ? nGen : nSuffix) + 16) * nSeq + nIdle;
  cp.n_batch = 512;
  cp.n_ubatch = 512;
  cp.n_seq_max = nSeq + (nIdle > 0 ? 1 : 0);
  cp.kv_unified = true;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.no_perf = true;
  // LLAMUX_RAW_FLASH_ATTN=on|off pins flash attention (default: llama.cpp's auto, as llamux).
  if (const char *fa = getenv("LLAMUX_RAW_FLASH_ATTN"); fa != nullptr && *fa != '\0') {
    cp.flash_attn_type = std::string(fa) == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_ENABLED;
  }
  llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  // Persistent CPU thread pools, as llama.cpp's own tools and llamux use (otherwise ggml
  // starts and joins its worker threads for every graph).
  {
    ggml_backend_reg_t cpu = ggml_backend_reg_by_name("CPU");
    using NewFn = ggml_threadpool_t (*)(ggml_threadpool_params *);
    auto newFn = cpu ? (NewFn)ggml_backend_reg_get_proc_address(cpu, "ggml_threadpool_new") : nullptr;
    if (newFn != nullptr) {
      ggml_threadpool_params p = ggml_threadpool_params_default(threads);
      llama_attach_threadpool(ctx, newFn(&p), nullptr);
    }
  }

  std::vector<llama_logit_bias> bans;
  for (int t = 0; t < nVocab; t++) {
    if (llama_vocab_is_eog(vocab, t)) bans.push_back({t, -INFINITY});
  }
  std::vector<llama_sampler *> chains(nSeq);
  for (int s = 0; s < nSeq; s++) {
    chains[s] = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chains[s], llama_sampler_init_logit_bias(nVocab, (int)bans.size(), bans.data()));
    llama_sampler_chain_add(chains[s], llama_sampler_init_greedy());
  }
  std::vector<llama_token_data> cur(nVocab);
  std::vector<llama_sampler *> plainChains(nSeq);
  for (int s = 0; s < nSeq; s++) {
    plainChains[s] = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(plainChains[s], llama_sampler_init_greedy());
  }
  auto sample = [&](int s, int idx) {
    if (plain) return llama_sampler_sample(plainChains[s], ctx, idx);
    const float *logits = llama_get_logits_ith(ctx, idx);
    for (int t = 0; t < nVocab; t++) cur[t] = {t, logits[t], 0.0f};
    llama_token_data_array arr = {cur.data(), cur.size(), -1, false};
    llama_sampler_apply(chains[s], &arr);
    llama_token tok = arr.data[arr.selected].id;
    llama_sampler_accept(chains[s], tok);
    return tok;
  };

  llama_batch batch = llama_batch_init(512 > nSeq ? 512 : nSeq, 0, 1);
  using clk = std::chrono::steady_clock;
  // Warm-up (graph allocation), then a clean memory.
  batch.n_tokens = 1;
  batch.token[0] = 3;
  batch.pos[0] = 0;
  batch.n_seq_id[0] = 1;
  batch.seq_id[0][0] = 0;
  batch.logits[0] = 1;
  if (llama_decode(ctx, batch) != 0) return 1;
  llama_memory_clear(llama_get_memory(ctx), true);
  for (int done = 0; done < nIdle;) {
    int n = nIdle - done < 512 ? nIdle - done : 512;
    batch.n_tokens = 0;
    for (int i = 0; i < n; i++) {
      int k = batch.n_tokens++;
      batch.token[k] = 3 + (int)(((done + i) * 40503u + 7u) % (unsigned)(nVocab - 3));
      batch.pos[k] = done + i;
      batch.n_seq_id[k] = 1;
      batch.seq_id[k][0] = nSeq;
      batch.logits[k] = 0;
    }
    if (llama_decode(ctx, batch) != 0) return 1;
    done += n;
  }
  // Prefill every sequence's prompt (deterministic pseudo-random tokens).
  std::vector<llama_token> last(nSeq);
  auto t0 = clk::now();
  for (int s = 0; s < nSeq; s++) {
    int done = 0;
    while (done < nPrompt) {
      int n = nPrompt - done < 512 ? nPrompt - done : 512;
      batch.n_tokens = 0;
      for (int i = 0; i < n; i++) {
        int k = batch.n_tokens++;
        batch.token[k] = 3 + (int)(((done + i) * 2654435761u + s * 97u) % (unsigned)(nVocab - 3));
        batch.pos[k] = done + i;
        batch.n_seq_id[k] = 1;
        batch.seq_id[k][0] = s;
        batch.logits[k] = (done + i == nPrompt - 1);
      }
      if (llama_decode(ctx, batch) != 0) return 1;
      done += n;
    }
    last[s] = sample(s, batch.n_tokens - 1);
  }
  auto t1 = clk::now();
  if (nSuffix > 0) {
    std::vector<double> ms;
    for (int r = -1; r < nGen; r++) {  // r = -1: an untimed warm-up (graph for this batch shape)
      batch.n_tokens = 0;
      for (int i = 0; i < nSuffix; i++) {
        int k = batch.n_tokens++;
        batch.token[k] = 3 + (int)((((r + 1) * 31 + i) * 2654435761u) % (unsigned)(nVocab - 3));
        batch.pos[k] = nPrompt + i;
        batch.n_seq_id[k] = 1;
        batch.seq_id[k][0] = 0;
        batch.logits[k] = (i == nSuffix - 1);
      }
      auto a = clk::now();
      if (llama_decode(ctx, batch) != 0) return 1;
      sample(0, batch.n_tokens - 1);
      if (r >= 0) ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - a).count());
      llama_memory_seq_rm(llama_get_memory(ctx), 0, nPrompt, -1);
    }
    std::sort(ms.begin(), ms.end());
    printf("{\"suffixTokens\":%d,\"promptTokens\":%d,\"medianMs\":%.3f,\"minMs\":%.3f,\"maxMs\":%.3f}\n", nSuffix, nPrompt,
           ms[ms.size() / 2], ms.front(), ms.back());
    return 0;
  }
  for (int g = 1; g < nGen; g++) {
    batch.n_tokens = 0;
    for (int s = 0; s < nSeq; s++) {
      int k = batch.n_tokens++;
      batch.token[k] = last[s];
      batch.pos[k] = nPrompt + g - 1;
      batch.n_seq_id[k] = 1;
      batch.seq_id[k][0] = s;
      batch.logits[k] = 1;
    }
    if (llama_decode(ctx, batch) != 0) return 1;
    for (int s = 0; s < nSeq; s++) last[s] = sample(s, s);
  }
  auto t2 = clk::now();
  double prefillS = std::chrono::duration<double>(t1 - t0).count();
  double decodeS = std::chrono::duration<double>(t2 - t1).count();
  printf("{\"prefillTokensPerSec\":%.3f,\"decodeTokensPerSec\":%.3f,\"sequences\":%d,\"promptTokens\":%d,\"genTokens\":%d}\n",
         nPrompt * nSeq / prefillS, (nGen - 1) * nSeq / decodeS, nSeq, nPrompt, nGen);
  llama_batch_free(batch);
  for (auto *c : chains) llama_sampler_free(c);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
