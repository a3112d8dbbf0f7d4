#pragma once
// Internal to src/llm: a reusable buffer with the SIMDJSON_PADDING bytes simdjson requires
// after a document, so per-event parsing allocates nothing once warmed up.
#include <simdjson.h>

#include <cstring>
#include <string>
#include <string_view>

namespace sluice::llm::detail {

class PaddedBuffer {
 public:
  simdjson::padded_string_view view(std::string_view s) {
    if (buf_.size() < s.size() + simdjson::SIMDJSON_PADDING) {
      buf_.resize(s.size() + simdjson::SIMDJSON_PADDING);
    }
    // An empty view may have a null data(): memcpy's arguments must not be null, even for 0 bytes.
    if (!s.empty()) std::memcpy(buf_.data(), s.data(), s.size());
    return simdjson::padded_string_view(buf_.data(), s.size(), buf_.size());
  }

 private:
  std::string buf_;
};

}  // namespace sluice::llm::detail
