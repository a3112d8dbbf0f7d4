#include "common/ids.hpp"

#include <chrono>
#include <cstdint>
#include <random>
#include <thread>

namespace sluice {
namespace {

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t next64() {
  thread_local std::uint64_t state = [] {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
           static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
           std::hash<std::thread::id>{}(std::this_thread::get_id());
  }();
  return splitmix(state);
}

void append_hex(std::string& out, std::uint64_t v, int digits) {
  static constexpr char kHex[] = "0123456789abcdef";
  char buf[16];
  for (int i = digits - 1; i >= 0; --i) {
    buf[i] = kHex[v & 0xf];
    v >>= 4;
  }
  out.append(buf, static_cast<std::size_t>(digits));
}

bool is_hex(std::string_view s) noexcept {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

void append_request_id(std::string& out) {
  append_hex(out, next64(), 16);
  append_hex(out, next64(), 16);
}

std::string new_request_id() {
  std::string out;
  out.reserve(32);
  append_request_id(out);
  return out;
}

bool valid_request_id(std::string_view id) noexcept {
  // The id is echoed in headers and written into JSON bodies and log lines as is: only
  // characters that need no escaping anywhere.
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

bool parse_traceparent(std::string_view v, TraceParent& out) noexcept {
  // version(2) - trace(32) - parent(16) - flags(2)
  if (v.size() != 55 || v[2] != '-' || v[35] != '-' || v[52] != '-') return false;
  auto ver = v.substr(0, 2), trace = v.substr(3, 32), parent = v.substr(36, 16), flags = v.substr(53, 2);
  if (!is_hex(ver) || !is_hex(trace) || !is_hex(parent) || !is_hex(flags) || ver == "ff") return false;
  if (trace == std::string_view("00000000000000000000000000000000") || parent == std::string_view("0000000000000000"))
    return false;
  out.trace_id.assign(trace);
  out.parent_id.assign(parent);
  out.flags.assign(flags);
  return true;
}

std::string next_traceparent(std::string_view incoming) {
  TraceParent tp;
  std::string out = "00-";
  if (parse_traceparent(incoming, tp)) {
    out += tp.trace_id;
  } else {
    append_hex(out, next64(), 16);
    append_hex(out, next64(), 16);
    tp.flags = "01";
  }
  out.push_back('-');
  append_hex(out, next64() | 1, 16);
  out.push_back('-');
  out += tp.flags;
  return out;
}

}  // namespace sluice
