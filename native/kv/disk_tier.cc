#include "kv/disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "kv/hash.h"
#include "kv/ram_tier.h"

namespace llamux {

namespace {
constexpr char kMagic[8] = {'L', 'M', 'X', 'K', 'V', 'S', 'T', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxQueuedBytes = 512ull << 20;  // writes beyond this are dropped, not queued

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  char fingerprint[32];
  uint64_t nTokens;
  uint64_t blobSize;
  uint64_t checksumA;
  uint64_t checksumB;
};

Hash128 Checksum(const std::vector<llama_token> &tokens, const uint8_t *blob, size_t n) {
  Hash128 h;
  h.Update(tokens.data(), tokens.size() * sizeof(llama_token));
  h.Update(blob, n);
  return h;
}

bool WriteAll(int fd, const void *data, size_t n) {
  const auto *p = static_cast<const uint8_t *>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(FILE *f, void *data, size_t n) { return fread(data, 1, n, f) == n; }

std::string FileNameFor(const std::vector<llama_token> &tokens) {
  Hash128 h;
  h.Update(tokens.data(), tokens.size() * sizeof(llama_token));
  return h.Hex() + ".lmxkv";
}
}  // namespace

DiskTier::DiskTier(std::string dir, std::string fingerprint, uint64_t budgetBytes, size_t blockSize)
    : dir_(std::move(dir)), fingerprint_(std::move(fingerprint)), budget_(budgetBytes), block_(blockSize) {
  fingerprint_.resize(32, '0');
  io_ = std::thread([this] { IoMain(); });
}

DiskTier::~DiskTier() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (io_.joinable()) io_.join();
}

void DiskTier::Add(std::string file, std::vector<llama_token> tokens, uint64_t bytes,
                   std::chrono::steady_clock::time_point retainUntil) {
  auto old = byFile_.find(file);
  if (old != byFile_.end()) {
    auto it = entries_.find(old->second);
    if (it != entries_.end()) {
      retainUntil = std::max(retainUntil, it->second.retainUntil);
      IndexBlocks(&index_, it->second.id, it->second.tokens, block_, false);
      lru_.erase(it->second.lru);
      bytes_ -= it->second.bytes;
      entries_.erase(it);
    }
    byFile_.erase(old);
  }
  Entry e;
  e.id = nextId_++;
  e.file = std::move(file);
  e.tokens = std::move(tokens);
  e.bytes = bytes;
  e.retainUntil = retainUntil;
  uint64_t added = e.id;
  lru_.push_front(e.id);
  e.lru = lru_.begin();
  bytes_ += bytes;
  IndexBlocks(&index_, e.id, e.tokens, block_, true);
  byFile_[e.file] = e.id;
  entries_.emplace(e.id, std::move(e));
  while (bytes_ > budget_ && !lru_.empty()) {
    uint64_t victim = Victim(added);
    Remove(victim);
    if (victim == added) break;
  }
}

uint64_t DiskTier::Victim(uint64_t added) const {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    if (*it != added && entries_.at(*it).retainUntil <= now) return *it;
  }
  const Entry &a = entries_.at(added);
  if (a.retainUntil <= now) return added;  // an unretained write never displaces a retained one
  uint64_t best = added;
  for (const auto &kv : entries_) {
    if (kv.second.retainUntil > now && kv.second.retainUntil < entries_.at(best).retainUntil) best = kv.first;
  }
  return best;
}

bool DiskTier::Retain(const std::vector<llama_token> &tokens, std::chrono::steady_clock::time_point until) {
  auto f = byFile_.find(dir_ + "/" + FileNameFor(tokens));
  if (f == byFile_.end()) return false;
  auto it = entries_.find(f->second);
  if (it == entries_.end() || it->second.tokens != tokens) return false;
  it->second.retainUntil = std::max(it->second.retainUntil, until);
  lru_.erase(it->second.lru);
  lru_.push_front(it->first);
  it->second.lru = lru_.begin();
  return true;
}

void DiskTier::Remove(uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry &e = it->second;
  IndexBlocks(&index_, e.id, e.tokens, block_, false);
  lru_.erase(e.lru);
  bytes_ -= e.bytes;
  byFile_.erase(e.file);
  {
    std::lock_guard<std::mutex> lk(mu_);
    Job j;
    j.kind = Job::Unlink;
    j.file = e.file;
    jobs_.push_back(std::move(j));
  }
  cv_.notify_one();
  entries_.erase(it);
}

void DiskTier::Load() {
  mkdir(dir_.c_str(), 0755);
  DIR *d = opendir(dir_.c_str());
  if (d == nullptr) return;
  std::vector<std::pair<time_t, std::string>> files;
  while (dirent *ent = readdir(d)) {
    std::string name = ent->d_name;
    std::string full = dir_ + "/" + name;
    if (name.size() > 6 && name.compare(name.size() - 6, 6, ".lmxkv") == 0) {
      struct stat st;
      if (stat(full.c_str(), &st) == 0) files.emplace_back(st.st_mtime, full);
    } else if (name.find(".tmp-") != std::string::npos) {
      unlink(full.c_str());  // a write that never finished (crash): never read back
    }
  }
  closedir(d);
  std::sort(files.begin(), files.end());  // oldest first, so the newest end up most recent
  for (auto &f : files) {
    std::vector<llama_token> tokens;
    std::vector<uint8_t> blob;
    if (!ReadFile(f.second, &tokens, &blob, false)) {
      unlink(f.second.c_str());
      rejected_++;
      continue;
    }
    struct stat st;
    uint64_t size = stat(f.second.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    Add(f.second, std::move(tokens), size);
  }
}

bool DiskTier::Save(const std::vector<llama_token> &tokens, std::vector<uint8_t> blob,
                    std::chrono::steady_clock::time_point retainUntil) {
  if (tokens.size() < block_) return false;
  uint64_t size = sizeof(Header) + tokens.size() * sizeof(llama_token) + blob.size();
  if (size > budget_) return false;
  if (Retain(tokens, retainUntil)) return true;  // already on disk (now the most recent)
  std::string file = dir_ + "/" + FileNameFor(tokens);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (queuedBytes_ + size > kMaxQueuedBytes) return false;  // the disk is behind: skip, never block
    queuedBytes_ += size;
    Job j;
    j.kind = Job::Write;
    j.file = std::move(file);
    j.tokens = tokens;
    j.blob = std::move(blob);
    j.retainUntil = retainUntil;
    jobs_.push_back(std::move(j));
  }
  cv_.notify_one();
  return true;
}

bool DiskTier::Has(const std::vector<llama_token> &tokens) {
  auto f = byFile_.find(dir_ + "/" + FileNameFor(tokens));
  if (f == byFile_.end()) return false;
  auto it = entries_.find(f->second);
  return it != entries_.end() && it->second.tokens == tokens;
}

bool DiskTier::WouldQueue(uint64_t blobBytes) {
  if (blobBytes > budget_) return false;
  std::lock_guard<std::mutex> lk(mu_);
  return queuedBytes_ + blobBytes <= kMaxQueuedBytes;
}

DiskTier::Entry *DiskTier::Lookup(const std::vector<llama_token> &prompt, size_t *common) {
  return LongestPrefix(index_, entries_, prompt, block_, common);
}

void DiskTier::Read(uint64_t requestId, const Entry &e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    Job j;
    j.kind = Job::Read;
    j.file = e.file;
    j.tokens = e.tokens;  // what the index says the file holds: verified on read
    j.requestId = requestId;
    j.entryId = e.id;
    jobs_.push_back(std::move(j));
  }
  cv_.notify_one();
}

std::vector<DiskTier::ReadResult> DiskTier::Poll() {
  std::vector<Written> written;
  std::vector<ReadResult> reads;
  {
    std::lock_guard<std::mutex> lk(mu_);
    written.swap(written_);
    reads.swap(reads_);
  }
  for (auto &w : written) Add(std::move(w.file), std::move(w.tokens), w.bytes, w.retainUntil);
  for (auto &r : reads) {
    if (!r.ok) {
      Remove(r.entryId);  // corrupt or vanished: never restore it
      rejected_++;
    }
  }
  return reads;
}

bool DiskTier::WriteFile(const Job &job, uint64_t *bytes) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char suffix[64];
  snprintf(suffix, sizeof(suffix), ".tmp-%d-%llx", static_cast<int>(getpid()), static_cast<unsigned long long>(rng()));
  std::string tmp = job.file + suffix;
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  Header h{};
  memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  memcpy(h.fingerprint, fingerprint_.data(), 32);
  h.nTokens = job.tokens.size();
  h.blobSize = job.blob.size();
  Hash128 c = Checksum(job.tokens, job.blob.data(), job.blob.size());
  h.checksumA = c.a;
  h.checksumB = c.b;
  bool ok = WriteAll(fd, &h, sizeof(h)) && WriteAll(fd, job.tokens.data(), job.tokens.size() * sizeof(llama_token)) &&
            WriteAll(fd, job.blob.data(), job.blob.size()) && fsync(fd) == 0;
  ok = (close(fd) == 0) && ok;
  if (!ok || rename(tmp.c_str(), job.file.c_str()) != 0) {
    unlink(tmp.c_str());  // full disk, permissions, ...: the state is simply not cached
    return false;
  }
  int dfd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  *bytes = sizeof(h) + job.tokens.size() * sizeof(llama_token) + job.blob.size();
  return true;
}

bool DiskTier::ReadFile(const std::string &file, std::vector<llama_token> *tokens, std::vector<uint8_t> *blob,
                        bool withBlob) {
  FILE *f = fopen(file.c_str(), "rb");
  if (f == nullptr) return false;
  struct stat st;
  bool ok = fstat(fileno(f), &st) == 0;
  Header h{};
  ok = ok && ReadAll(f, &h, sizeof(h)) && memcmp(h.magic, kMagic, sizeof(kMagic)) == 0 && h.version == kVersion &&
       memcmp(h.fingerprint, fingerprint_.data(), 32) == 0;
  // Sizes must match the file exactly (a truncated file is rejected before any allocation).
  ok = ok && h.nTokens < (1u << 26) &&
       static_cast<uint64_t>(st.st_size) == sizeof(h) + h.nTokens * sizeof(llama_token) + h.blobSize;
  if (ok) {
    tokens->resize(h.nTokens);
    ok = ReadAll(f, tokens->data(), h.nTokens * sizeof(llama_token));
  }
  if (ok && withBlob) {
    blob->resize(h.blobSize);
    ok = ReadAll(f, blob->data(), h.blobSize);
    if (ok) {
      Hash128 c = Checksum(*tokens, blob->data(), blob->size());
      ok = c.a == h.checksumA && c.b == h.checksumB;
    }
  }
  fclose(f);
  return ok;
}

void DiskTier::IoMain() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and every queued write is done
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    if (job.kind == Job::Write) {
      uint64_t bytes = 0;
      uint64_t size = sizeof(Header) + job.tokens.size() * sizeof(llama_token) + job.blob.size();
      bool ok = WriteFile(job, &bytes);
      std::lock_guard<std::mutex> lk(mu_);
      queuedBytes_ -= std::min(queuedBytes_, size);
      if (ok) written_.push_back({job.file, std::move(job.tokens), bytes, job.retainUntil});
    } else if (job.kind == Job::Read) {
      ReadResult r;
      r.requestId = job.requestId;
      r.entryId = job.entryId;
      std::vector<llama_token> tokens;
      r.ok = ReadFile(job.file, &tokens, &r.blob, true);
      // A file replaced since the index scan holds another state: never restore it.
      if (r.ok && tokens != job.tokens) r.ok = false;
      if (!r.ok) {
        unlink(job.file.c_str());
        r.blob.clear();
      }
      std::lock_guard<std::mutex> lk(mu_);
      reads_.push_back(std::move(r));
    } else {
      unlink(job.file.c_str());
    }
  }
}

}  // namespace llamux
