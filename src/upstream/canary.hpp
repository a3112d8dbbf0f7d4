#pragma once
// Canary judge: compares the canary's outcomes with the stable set's over a sliding window
// and decides, once, to roll back when the canary is worse past a threshold (error rate
// higher by more than a margin, or P95 time to first token more than a ratio slower).
// Pure logic; time is passed in. Thread-safe (one mutex).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "upstream/window.hpp"

namespace sluice::upstream {

struct CanarySettings {
  std::chrono::milliseconds window{60'000};
  std::uint32_t min_requests = 20;        // on each side before judging
  double max_error_rate_increase = 0.1;   // < 0: off
  double max_ttft_ratio = 2.0;            // 0: off
};

class CanaryJudge {
 public:
  using Clock = std::chrono::steady_clock;

  explicit CanaryJudge(CanarySettings s = {});

  // An outcome on one side; ttft_ms < 0 when there was no first token. Returns true when
  // this outcome triggered the rollback (once; after that, rolled_back() stays true).
  bool record(Clock::time_point now, bool canary, bool failed, double ttft_ms);

  bool rolled_back() const noexcept { return rolled_back_.load(std::memory_order_relaxed); }
  std::string reason() const;  // why it rolled back

  struct Sides {
    SlidingWindow::Summary stable, canary;
  };
  Sides sides(Clock::time_point now) const;

 private:
  CanarySettings s_;
  mutable std::mutex mu_;
  mutable SlidingWindow stable_, canary_;  // a summary expires old buckets
  std::atomic<bool> rolled_back_{false};
  std::string reason_;
};

}  // namespace sluice::upstream
