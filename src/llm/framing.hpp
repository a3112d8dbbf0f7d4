#pragma once
// Incremental framing of upstream streams: Server-Sent Events and NDJSON. Input arrives in
// arbitrary pieces (an event split across reads, several events per read, CRLF or LF);
// output is whole events. Both are bounded: an event or line longer than max_bytes is an
// error, never an unbounded buffer.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace sluice::llm {

struct SseEvent {
  std::string_view event;  // "" when the event had no "event:" field
  std::string_view data;   // data lines joined with '\n'
  std::string_view id;
};

class SseParser {
 public:
  explicit SseParser(std::size_t max_bytes = 1 << 20) : max_bytes_(max_bytes) {}
  // Calls on_event for each complete event. Returns false if an event exceeds max_bytes.
  bool feed(std::string_view bytes, const std::function<void(const SseEvent&)>& on_event);
  // True when bytes of an unfinished event are buffered.
  bool pending() const noexcept { return !buf_.empty(); }

 private:
  std::size_t max_bytes_;
  std::string buf_;     // unconsumed input
  std::string event_, data_, id_;
};

class NdjsonParser {
 public:
  explicit NdjsonParser(std::size_t max_bytes = 1 << 20) : max_bytes_(max_bytes) {}
  // Calls on_line for each complete non-empty line (without the newline / CR).
  bool feed(std::string_view bytes, const std::function<void(std::string_view)>& on_line);
  // At end of input: delivers a final line that had no trailing newline.
  void finish(const std::function<void(std::string_view)>& on_line);
  bool pending() const noexcept { return !buf_.empty(); }

 private:
  std::size_t max_bytes_;
  std::string buf_;
};

}  // namespace sluice::llm
