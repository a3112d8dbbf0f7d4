#pragma once
// A backend's in-flight limit that follows its time to first token (docs/routing.md,
// "Adaptive concurrency"). The article's point: a model server past its sweet spot does
// not refuse, it answers later for everyone; the gateway sees it first in the TTFT. Every
// `interval`, from the TTFTs of the requests that ended in it:
//   - p90 above target_ttft: the limit shrinks by a quarter (at least by one), not below min;
//   - else, when the limit was reached in the period: it grows by one, up to the ceiling
//     (the backend's max_in_flight);
//   - fewer than kMinSamples TTFTs: no change (nothing to judge by).
// Multiplicative decrease, additive increase: it backs off fast and probes back slowly.
// Thread-safe: the workers observe, the monitor thread ticks.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace sluice::upstream {

class AdaptiveConcurrency {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kMinSamples = 5;
  static constexpr std::size_t kMaxSamples = 1024;  // per period; later ones replace earlier ones in turn

  // Off (limit() is 0) until configured with a target.
  void configure(std::chrono::milliseconds target_ttft, int min, int ceiling, std::chrono::milliseconds interval,
                 Clock::time_point now);
  bool on() const noexcept { return target_ms_ > 0; }
  int limit() const noexcept { return limit_.load(std::memory_order_relaxed); }

  // A request started with `in_flight` requests on the backend (itself included).
  void started(std::int64_t in_flight) noexcept;
  // A request's TTFT (ms; < 0: none, e.g. it failed).
  void observe(double ttft_ms);
  // Reconsiders the limit when the period is over; true when it changed.
  bool tick(Clock::time_point now, std::int64_t in_flight_now);

  struct Snapshot {
    int limit = 0;
    double last_p90_ms = -1;  // of the last period judged
    std::uint64_t decreases = 0, increases = 0;
  };
  Snapshot snapshot() const;

 private:
  double target_ms_ = 0;
  int min_ = 1, ceiling_ = 0;
  Clock::duration interval_{};
  std::atomic<int> limit_{0};
  std::atomic<std::int64_t> peak_{0};  // the most in flight in this period
  mutable std::mutex mu_;
  std::vector<double> samples_;
  std::size_t next_ = 0;  // replaced in turn once kMaxSamples are held
  Clock::time_point period_start_{};
  double last_p90_ = -1;
  std::uint64_t decreases_ = 0, increases_ = 0;
};

}  // namespace sluice::upstream
