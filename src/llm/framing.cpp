#include "llm/framing.hpp"

#include <cstring>

namespace sluice::llm {
namespace {

constexpr std::size_t npos = std::string_view::npos;

// Finds line terminators (LF, CRLF or a lone CR) in a buffer. The next CR position is
// cached, so a buffer of LF-terminated lines is not rescanned for a CR at every line:
// both searches are memchr and the whole scan stays linear.
class LineScanner {
 public:
  explicit LineScanner(std::string_view s) : s_(s) {}

  // Line terminator at or after `from`: its position and length (1 or 2). A CR that is the
  // last byte of the buffer counts as a whole terminator of length 1 (the caller knows a
  // following LF, in the next read, belongs to it). {npos, 0} when there is none.
  std::pair<std::size_t, std::size_t> next(std::size_t from) {
    if (!cr_valid_ || (cr_ != npos && cr_ < from)) {
      cr_ = find('\r', from);
      cr_valid_ = true;
    }
    std::size_t lf = find('\n', from, cr_ == npos ? s_.size() : cr_);
    if (lf != npos) return {lf, 1};
    if (cr_ == npos) return {npos, 0};
    if (cr_ + 1 < s_.size() && s_[cr_ + 1] == '\n') return {cr_, 2};
    return {cr_, 1};
  }

 private:
  // memchr for c in [from, limit); npos when absent.
  std::size_t find(char c, std::size_t from, std::size_t limit = npos) const {
    if (limit > s_.size()) limit = s_.size();
    if (from >= limit) return npos;
    const void* p = std::memchr(s_.data() + from, c, limit - from);
    return p ? static_cast<const char*>(p) - s_.data() : npos;
  }

  std::string_view s_;
  std::size_t cr_ = npos;
  bool cr_valid_ = false;
};

}  // namespace

// Design: complete events are parsed straight out of the caller's bytes (an event whose
// only data line lies in the input is delivered without any copy). An event that is not
// complete at the end of a read is kept raw in buf_ (from its first line); the next read
// appends up to the event's terminating blank line and the event is parsed once, whole.
// Every byte is therefore scanned a bounded number of times, whatever the read sizes.
bool SseParser::feed(std::string_view bytes,
                     const std::function<void(const SseEvent&)>& on_event) {
  // Parses the lines of s, dispatching complete events. Returns the offset where the
  // unfinished trailing event starts (s.size() when there is none), or npos when an event
  // is larger than max_bytes_.
  auto parse = [&](std::string_view s) -> std::size_t {
    LineScanner sc(s);
    std::size_t pos = 0;
    std::size_t event_start = 0;
    std::string_view event_type;
    std::string_view single_data;  // the data when the event has exactly one data line
    int data_lines = 0;
    while (pos < s.size()) {
      auto [t, tlen] = sc.next(pos);
      if (t == npos) break;
      std::string_view line = s.substr(pos, t - pos);
      pos = t + tlen;
      if (line.empty()) {  // blank line: dispatch
        if (t - event_start > max_bytes_) return npos;
        if (data_lines > 0) {
          SseEvent ev;
          ev.event = event_type;
          ev.data = data_lines == 1 ? single_data : std::string_view(data_);
          ev.id = id_;
          on_event(ev);
        }
        event_type = {};
        single_data = {};
        data_lines = 0;
        event_start = pos;
        continue;
      }
      if (line.front() == ':') continue;  // comment
      std::string_view field = line, value;
      if (auto colon = line.find(':'); colon != npos) {
        field = line.substr(0, colon);
        value = line.substr(colon + 1);
        if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      }
      if (field == "data") {
        if (data_lines == 0) {
          single_data = value;
        } else {
          if (data_lines == 1) data_.assign(single_data);
          data_.push_back('\n');
          data_.append(value);
        }
        ++data_lines;
      } else if (field == "event") {
        event_type = value;
      } else if (field == "id") {
        if (value.find('\0') == npos) id_.assign(value);
      }
      // "retry" and unknown fields are ignored.
    }
    if (s.size() - event_start > max_bytes_) return npos;
    return event_start;
  };

  std::size_t p = 0;
  if (!buf_.empty()) {
    // An event is unfinished: find its end (a blank line) in the new bytes, knowing how
    // the buffered bytes end.
    const bool after_cr = buf_.back() == '\r';
    const bool line_start = after_cr || buf_.back() == '\n';
    if (after_cr && !bytes.empty() && bytes.front() == '\n') {
      buf_.push_back('\n');  // second half of a CRLF split across reads
      p = 1;
    }
    LineScanner sc(bytes);
    std::size_t q = p, end = npos;
    bool first = true;
    while (q < bytes.size()) {
      auto [t, tlen] = sc.next(q);
      if (t == npos) break;
      if (t == q && (!first || line_start)) {
        end = t + tlen;
        break;
      }
      first = false;
      q = t + tlen;
    }
    if (end == npos) {
      buf_.append(bytes.substr(p));
      if (buf_.size() > max_bytes_) {
        buf_.clear();
        return false;
      }
      return true;
    }
    buf_.append(bytes.substr(p, end - p));
    const std::size_t rest = parse(buf_);
    buf_.clear();
    if (rest == npos) return false;
    p = end;
  }
  bytes.remove_prefix(p);
  const std::size_t rest = parse(bytes);
  if (rest == npos) return false;
  if (rest < bytes.size()) buf_.assign(bytes.substr(rest));
  return true;
}

bool NdjsonParser::feed(std::string_view bytes,
                        const std::function<void(std::string_view)>& on_line) {
  auto deliver = [&](std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) on_line(line);
  };
  std::size_t p = 0;
  if (!buf_.empty()) {
    const void* nl = std::memchr(bytes.data(), '\n', bytes.size());
    if (!nl) {
      buf_.append(bytes);
      if (buf_.size() > max_bytes_) {
        buf_.clear();
        return false;
      }
      return true;
    }
    p = static_cast<const char*>(nl) - bytes.data();
    buf_.append(bytes.substr(0, p));
    ++p;
    if (buf_.size() > max_bytes_) {
      buf_.clear();
      return false;
    }
    deliver(buf_);
    buf_.clear();
  }
  while (p < bytes.size()) {
    const void* nl = std::memchr(bytes.data() + p, '\n', bytes.size() - p);
    if (!nl) break;
    const std::size_t e = static_cast<const char*>(nl) - bytes.data();
    if (e - p > max_bytes_) return false;
    deliver(bytes.substr(p, e - p));
    p = e + 1;
  }
  if (p < bytes.size()) {
    if (bytes.size() - p > max_bytes_) return false;
    buf_.assign(bytes.substr(p));
  }
  return true;
}

void NdjsonParser::finish(const std::function<void(std::string_view)>& on_line) {
  if (buf_.empty()) return;
  std::string line = std::move(buf_);
  buf_.clear();
  std::string_view v = line;
  if (!v.empty() && v.back() == '\r') v.remove_suffix(1);
  if (!v.empty()) on_line(v);
}

}  // namespace sluice::llm
