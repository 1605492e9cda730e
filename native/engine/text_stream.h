// Turns token pieces into text deltas: never splits a UTF-8 character and never emits
// text at or past a stop string (matches across token boundaries by holding back any
// suffix that could still begin one).
#pragma once
#include <string>
#include <vector>

namespace llamux {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stops = {});

  // Adds raw piece bytes. Appends what may be emitted to `out`. Returns true when a stop
  // string completed (nothing from it onwards is emitted).
  bool Push(const std::string &bytes, std::string *out);

  // End of generation: releases everything still held back (incomplete UTF-8 included).
  void Flush(std::string *out);

  const std::string &MatchedStop() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string partial_;  // bytes of an incomplete UTF-8 character
  std::string held_;     // complete text held back because it may start a stop string
  std::string matched_;
  size_t maxStop_ = 0;
};

// Length of the longest prefix of `s` that ends on a UTF-8 character boundary.
size_t CompleteUtf8Prefix(const std::string &s);

}  // namespace llamux
