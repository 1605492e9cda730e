// The disk tier of saved sequence states. Each state is one file: a header (magic, format
// version, model/KV fingerprint, token count, blob size, checksum), the tokens, the blob.
// Files are written by a background I/O thread (temp file, fsync, rename), so the decode
// loop never waits on the disk; reads for a restore also run on that thread. A file that is
// truncated, corrupt or made for another model/KV layout is removed and never restored.
// A byte budget is enforced with LRU eviction; an entry retained until a deadline (a
// prompt-cache breakpoint, prefix_retention.h) goes only after every unretained one, and only
// for another retained entry. Retention lives in the index (not in the files): after a restart
// every file is an ordinary LRU entry. The index lives on the engine thread.
#pragma once
#include <llama.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace llamux {

class DiskTier {
 public:
  struct Entry {
    uint64_t id = 0;
    std::string file;
    std::vector<llama_token> tokens;
    uint64_t bytes = 0;
    std::chrono::steady_clock::time_point retainUntil{};
    std::list<uint64_t>::iterator lru;
  };
  struct ReadResult {
    uint64_t requestId = 0;
    uint64_t entryId = 0;
    bool ok = false;
    std::vector<uint8_t> blob;
  };

  DiskTier(std::string dir, std::string fingerprint, uint64_t budgetBytes, size_t blockSize = 16);
  ~DiskTier();

  // Engine thread ----------------------------------------------------------------------
  // Scans the directory (called once before the first decode).
  void Load();
  // Queues a write of `tokens` + `blob` (the copy-out already happened on the engine thread),
  // retained until `retainUntil` once written. False when it is not queued (shorter than a
  // block, over the budget, the disk behind); true too when these tokens are on disk already.
  bool Save(const std::vector<llama_token> &tokens, std::vector<uint8_t> blob,
            std::chrono::steady_clock::time_point retainUntil = {});
  // Extends the retention of the file holding exactly `tokens`; false when none does.
  bool Retain(const std::vector<llama_token> &tokens, std::chrono::steady_clock::time_point until);
  Entry *Lookup(const std::vector<llama_token> &prompt, size_t *common);
  // True when exactly these tokens are on disk already (a write would change nothing).
  bool Has(const std::vector<llama_token> &tokens);
  // Whether a write of a `blobBytes` state would be queued now (budget, disk not behind):
  // checked before the engine thread copies the state out.
  bool WouldQueue(uint64_t blobBytes);
  // Queues a read of an entry's blob for request `requestId`; results come back via Poll().
  void Read(uint64_t requestId, const Entry &e);
  // Applies finished writes to the index (enforcing the budget) and returns finished reads.
  std::vector<ReadResult> Poll();
  void Remove(uint64_t id);

  uint64_t Bytes() const { return bytes_; }
  size_t Count() const { return entries_.size(); }
  uint64_t Budget() const { return budget_; }
  uint64_t Rejected() const { return rejected_; }
  const std::string &Dir() const { return dir_; }

 private:
  struct Job {
    enum Kind { Write, Read, Unlink } kind;
    std::string file;
    std::vector<llama_token> tokens;
    std::vector<uint8_t> blob;
    uint64_t requestId = 0, entryId = 0;
    std::chrono::steady_clock::time_point retainUntil{};
  };
  struct Written {
    std::string file;
    std::vector<llama_token> tokens;
    uint64_t bytes;
    std::chrono::steady_clock::time_point retainUntil;
  };

  void IoMain();
  bool WriteFile(const Job &job, uint64_t *bytes);
  bool ReadFile(const std::string &file, std::vector<llama_token> *tokens, std::vector<uint8_t> *blob, bool withBlob);
  void Add(std::string file, std::vector<llama_token> tokens, uint64_t bytes,
           std::chrono::steady_clock::time_point retainUntil = {});
  // The entry to evict next: the least recently used unretained one, else (only when
  // `added` is retained) the retained one with the soonest deadline, else `added` itself.
  uint64_t Victim(uint64_t added) const;

  std::string dir_;
  std::string fingerprint_;  // 32 hex chars
  uint64_t budget_;
  size_t block_;
  uint64_t bytes_ = 0;
  uint64_t nextId_ = 1;
  uint64_t rejected_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;
  std::unordered_map<std::string, uint64_t> byFile_;
  std::list<uint64_t> lru_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> index_;  // BlockIndex of ram_tier.h

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  uint64_t queuedBytes_ = 0;
  std::vector<Written> written_;
  std::vector<ReadResult> reads_;
  bool stop_ = false;
  std::thread io_;
};

}  // namespace llamux
