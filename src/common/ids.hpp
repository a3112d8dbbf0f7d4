#pragma once
// Request ids and W3C trace context.
#include <string>
#include <string_view>

namespace sluice {

// 32 lowercase hex chars from a per-thread generator; cheap and unique enough for logs.
std::string new_request_id();
void append_request_id(std::string& out);  // the same, appended

// Accepts a client-supplied X-Request-Id when it is 1..128 characters of letters, digits
// and - _ . : (safe unescaped in headers, JSON and logs); else the caller makes a new one.
bool valid_request_id(std::string_view id) noexcept;

// W3C traceparent "00-<32 hex trace>-<16 hex parent>-<2 hex flags>".
struct TraceParent {
  std::string trace_id;  // 32 hex
  std::string parent_id; // 16 hex
  std::string flags;     // 2 hex
};
bool parse_traceparent(std::string_view v, TraceParent& out) noexcept;
// Returns the traceparent to send upstream: same trace id, a fresh span id for the hop;
// a new trace when the client sent none (or an invalid one).
std::string next_traceparent(std::string_view incoming);

}  // namespace sluice
