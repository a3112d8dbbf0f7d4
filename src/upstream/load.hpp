#pragma once
// A model server's own load signals (docs/routing.md, "Load-aware admission"), read from
// what it publishes: vLLM's Prometheus endpoint, Ollama's /api/ps. No I/O here.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice::upstream {

struct LoadReading {
  double kv = -1;              // share of the KV cache (or memory) in use, 0..1; -1 unknown
  std::int64_t running = -1;   // requests being generated; -1 unknown
  std::int64_t waiting = -1;   // requests queued in the server; -1 unknown
};

// vLLM's /metrics (Prometheus text): vllm:num_requests_running and
// vllm:num_requests_waiting summed over their series, vllm:kv_cache_usage_perc (or the
// older vllm:gpu_cache_usage_perc) the highest of its series. nullopt when none of them
// is there.
std::optional<LoadReading> read_vllm_metrics(std::string_view text);

// Ollama's /api/ps ({"models":[{"size_vram":N,...}...]}): the memory its loaded models
// hold over `vram_bytes`. nullopt for anything else.
std::optional<LoadReading> read_ollama_ps(std::string_view json, std::int64_t vram_bytes);

// The last reading of one backend, shared by the thread that reads it and the workers.
class Load {
 public:
  using Clock = std::chrono::steady_clock;
  void set(const LoadReading& r, Clock::time_point at) noexcept;
  void failed() noexcept { failures_.fetch_add(1, std::memory_order_relaxed); }
  // The reading, when it is younger than `fresh` (an old one says nothing).
  std::optional<LoadReading> get(Clock::time_point now, Clock::duration fresh) const noexcept;
  std::uint64_t reads() const noexcept { return reads_.load(std::memory_order_relaxed); }
  std::uint64_t failures() const noexcept { return failures_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> kv_{-1};
  std::atomic<std::int64_t> running_{-1}, waiting_{-1};
  std::atomic<Clock::rep> at_{0};
  std::atomic<std::uint64_t> reads_{0}, failures_{0};
};

}  // namespace sluice::upstream
