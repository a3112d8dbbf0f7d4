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

// An on-demand parser with its padding buffer, one per thread, for a document parsed and
// read within one synchronous call (what the parse yields is used before the next parse on
// the thread). A stream's translator holding its own would keep about 10 KiB per open
// stream (the parser's depth and string buffers); one per thread costs that once.
struct ScratchParser {
  simdjson::ondemand::parser parser;
  PaddedBuffer pad;
  simdjson::simdjson_result<simdjson::ondemand::document> iterate(std::string_view s) & {
    return parser.iterate(pad.view(s));
  }
};

inline ScratchParser& scratch_parser() {
  thread_local ScratchParser p;
  return p;
}

}  // namespace sluice::llm::detail
