#include "engine/command_queue.h"

#include <algorithm>

namespace llamux {

bool CommandQueue::Submit(std::unique_ptr<RequestParams> params, uint32_t limit) {
  std::lock_guard<std::mutex> lk(mu_);
  if (waiting_ >= limit) return false;
  waiting_++;
  q_.submitted.push_back(std::move(params));
  cv_.notify_one();
  return true;
}

void CommandQueue::SubmitEmbed(std::unique_ptr<EmbedJob> job) {
  std::lock_guard<std::mutex> lk(mu_);
  q_.embeds.push_back(std::move(job));
  cv_.notify_one();
}

void CommandQueue::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  q_.cancels.push_back(id);
  if (std::find(inBatch_.begin(), inBatch_.end(), id) != inBatch_.end()) abortNow_.store(true);
  cv_.notify_one();
}

void CommandQueue::SetPaused(uint64_t id, bool paused) {
  std::lock_guard<std::mutex> lk(mu_);
  q_.pauses.emplace_back(id, paused);
  cv_.notify_one();
}

void CommandQueue::Close() {
  std::lock_guard<std::mutex> lk(mu_);
  closing_ = true;
  abortNow_.store(true);
  cv_.notify_one();
}

bool CommandQueue::Closing() {
  std::lock_guard<std::mutex> lk(mu_);
  return closing_;
}

bool CommandQueue::ReadyLocked() const {
  return closing_ || !q_.submitted.empty() || !q_.embeds.empty() || !q_.cancels.empty() || !q_.pauses.empty();
}

bool CommandQueue::Ready() {
  std::lock_guard<std::mutex> lk(mu_);
  return ReadyLocked();
}

bool CommandQueue::Wait(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lk(mu_);
  auto ready = [this] { return ReadyLocked(); };
  if (d.count() < 0) {
    cv_.wait(lk, ready);
    return true;
  }
  return cv_.wait_for(lk, d, ready);
}

CommandQueue::Commands CommandQueue::Take() {
  std::lock_guard<std::mutex> lk(mu_);
  Commands out;
  std::swap(out, q_);
  if (!closing_) abortNow_.store(false);
  return out;
}

CommandQueue::Commands CommandQueue::TakeAll() {
  std::lock_guard<std::mutex> lk(mu_);
  Commands out;
  std::swap(out, q_);
  return out;
}

void CommandQueue::Left(uint32_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  waiting_ -= std::min(n, waiting_);
}

void CommandQueue::Returned(uint32_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  waiting_ += n;
}

void CommandQueue::DecodeStarts(const std::vector<uint64_t> &ids) {
  std::lock_guard<std::mutex> lk(mu_);
  inBatch_ = ids;
  for (uint64_t id : q_.cancels) {
    if (std::find(inBatch_.begin(), inBatch_.end(), id) != inBatch_.end()) abortNow_.store(true);
  }
  if (closing_) abortNow_.store(true);
}

void CommandQueue::DecodeEnded() {
  std::lock_guard<std::mutex> lk(mu_);
  inBatch_.clear();
}

void CommandQueue::ClearAbort() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!closing_) abortNow_.store(false);
}

bool CommandQueue::AbortCallback(void *data) {
  return static_cast<CommandQueue *>(data)->abortNow_.load(std::memory_order_relaxed);
}

}  // namespace llamux
