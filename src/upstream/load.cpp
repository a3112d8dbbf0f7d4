#include "upstream/load.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <cmath>

namespace sluice::upstream {

namespace {

// One sample line "name{labels} value [timestamp]": its name and value.
bool sample(std::string_view line, std::string_view& name, double& value) {
  if (line.empty() || line.front() == '#') return false;
  std::size_t end = line.find_first_of("{ ");
  if (end == std::string_view::npos) return false;
  name = line.substr(0, end);
  std::size_t at = end;
  if (line[at] == '{') {
    // Label values may hold '}' inside quotes.
    bool quoted = false;
    for (++at; at < line.size(); ++at) {
      const char c = line[at];
      if (c == '\\' && quoted) ++at;
      else if (c == '"') quoted = !quoted;
      else if (c == '}' && !quoted) break;
    }
    if (at >= line.size()) return false;
    ++at;
  }
  while (at < line.size() && line[at] == ' ') ++at;
  std::string_view rest = line.substr(at);
  rest = rest.substr(0, rest.find(' '));
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
  return ec == std::errc() && p == rest.data() + rest.size() && std::isfinite(value);
}

}  // namespace

std::optional<LoadReading> read_vllm_metrics(std::string_view text) {
  LoadReading r;
  double running = 0, waiting = 0, kv = -1, gpu = -1;
  bool any_running = false, any_waiting = false;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string_view name;
    double v = 0;
    if (!sample(line, name, v)) continue;
    if (name == "vllm:num_requests_running") running += v, any_running = true;
    else if (name == "vllm:num_requests_waiting") waiting += v, any_waiting = true;
    else if (name == "vllm:kv_cache_usage_perc") kv = std::max(kv, v);
    else if (name == "vllm:gpu_cache_usage_perc") gpu = std::max(gpu, v);
  }
  if (kv < 0) kv = gpu;
  if (!any_running && !any_waiting && kv < 0) return std::nullopt;
  r.kv = kv < 0 ? -1 : std::min(kv, 1.0);
  // A count is clamped before it becomes an integer: a server that publishes 1e52 (or a
  // sum that overflowed to infinity) must not make the conversion undefined.
  const auto count = [](double c) { return static_cast<std::int64_t>(std::clamp(c, 0.0, 1e12)); };
  r.running = any_running ? count(running) : -1;
  r.waiting = any_waiting ? count(waiting) : -1;
  return r;
}

std::optional<LoadReading> read_ollama_ps(std::string_view json, std::int64_t vram_bytes) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(json, ec);
  if (ec || !v.is_object() || vram_bytes <= 0) return std::nullopt;
  const auto* models = v.get_object().if_contains("models");
  if (!models || !models->is_array()) return std::nullopt;
  double used = 0;
  for (const auto& m : models->get_array()) {
    const auto* o = m.if_object();
    const auto* size = o ? o->if_contains("size_vram") : nullptr;
    if (size && size->is_number()) used += std::max(0.0, size->to_number<double>(ec));
  }
  LoadReading r;
  r.kv = std::min(used / static_cast<double>(vram_bytes), 1.0);
  r.running = static_cast<std::int64_t>(models->get_array().size());
  return r;
}

void Load::set(const LoadReading& r, Clock::time_point at) noexcept {
  kv_.store(r.kv, std::memory_order_relaxed);
  running_.store(r.running, std::memory_order_relaxed);
  waiting_.store(r.waiting, std::memory_order_relaxed);
  at_.store(at.time_since_epoch().count(), std::memory_order_release);
  reads_.fetch_add(1, std::memory_order_relaxed);
}

std::optional<LoadReading> Load::get(Clock::time_point now, Clock::duration fresh) const noexcept {
  const auto at = at_.load(std::memory_order_acquire);
  if (at == 0 || now - Clock::time_point(Clock::duration(at)) > fresh) return std::nullopt;
  return LoadReading{kv_.load(std::memory_order_relaxed), running_.load(std::memory_order_relaxed),
                     waiting_.load(std::memory_order_relaxed)};
}

}  // namespace sluice::upstream
