#include "engine/text_stream.h"

#include <algorithm>

namespace llamux {

size_t CompleteUtf8Prefix(const std::string &s) {
  size_t n = s.size();
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t i = n;
  int cont = 0;
  while (i > 0 && cont < 4) {
    unsigned char c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0) == 0x80) {
      cont++;
      i--;
      continue;
    }
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    // A lead byte followed by fewer continuation bytes than it needs is incomplete.
    if (need > 1 && static_cast<size_t>(cont) + 1 < need) return i - 1;
    return n;
  }
  return n;  // only continuation bytes (invalid): let them through rather than stall
}

TextStream::TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove_if(stops_.begin(), stops_.end(), [](const std::string &s) { return s.empty(); }),
               stops_.end());
  for (auto &s : stops_) maxStop_ = std::max(maxStop_, s.size());
}

bool TextStream::Push(const std::string &bytes, std::string *out) {
  partial_ += bytes;
  size_t complete = CompleteUtf8Prefix(partial_);
  if (complete == 0) return false;
  held_.append(partial_, 0, complete);
  partial_.erase(0, complete);
  if (stops_.empty()) {
    out->append(held_);
    held_.clear();
    return false;
  }
  // Earliest full match wins.
  size_t best = std::string::npos;
  for (auto &s : stops_) {
    size_t p = held_.find(s);
    if (p != std::string::npos && p < best) {
      best = p;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    out->append(held_, 0, best);
    held_.clear();
    partial_.clear();
    return true;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (auto &s : stops_) {
    size_t maxk = std::min(s.size() - 1, held_.size());
    for (size_t k = maxk; k > hold; k--) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  size_t emit = held_.size() - hold;
  // Never cut a UTF-8 character when holding back.
  while (emit > 0 && emit < held_.size() && (static_cast<unsigned char>(held_[emit]) & 0xC0) == 0x80) emit--;
  out->append(held_, 0, emit);
  held_.erase(0, emit);
  return false;
}

void TextStream::Flush(std::string *out) {
  out->append(held_);
  out->append(partial_);
  held_.clear();
  partial_.clear();
}

}  // namespace llamux
