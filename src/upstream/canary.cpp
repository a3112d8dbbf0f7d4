#include "upstream/canary.hpp"

#include <cstdio>

namespace sluice::upstream {

CanaryJudge::CanaryJudge(CanarySettings s) : s_(s), stable_(s.window), canary_(s.window) {}

bool CanaryJudge::record(Clock::time_point now, bool canary, bool failed, double ttft_ms) {
  if (rolled_back()) return false;
  std::lock_guard lock(mu_);
  if (rolled_back()) return false;
  (canary ? canary_ : stable_).add(now, failed, failed ? -1 : ttft_ms);
  if (!canary) return false;  // judged on the canary's outcomes
  const auto st = stable_.summary(now);
  const auto ca = canary_.summary(now);
  if (st.total < s_.min_requests || ca.total < s_.min_requests) return false;
  char buf[160];
  if (s_.max_error_rate_increase >= 0 && ca.error_rate() > st.error_rate() + s_.max_error_rate_increase) {
    std::snprintf(buf, sizeof buf, "canary error rate %.2f against stable %.2f (over %llu and %llu requests)",
                  ca.error_rate(), st.error_rate(), static_cast<unsigned long long>(ca.total),
                  static_cast<unsigned long long>(st.total));
  } else if (s_.max_ttft_ratio > 0 && ca.timed >= s_.min_requests && st.timed >= s_.min_requests &&
             ca.p95_ms > st.p95_ms * s_.max_ttft_ratio) {
    std::snprintf(buf, sizeof buf, "canary p95 time to first token %.0f ms against stable %.0f ms", ca.p95_ms,
                  st.p95_ms);
  } else {
    return false;
  }
  reason_ = buf;
  rolled_back_.store(true, std::memory_order_relaxed);
  return true;
}

std::string CanaryJudge::reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

CanaryJudge::Sides CanaryJudge::sides(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  return {stable_.summary(now), canary_.summary(now)};
}

}  // namespace sluice::upstream
