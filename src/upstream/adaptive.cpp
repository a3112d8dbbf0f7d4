#include "upstream/adaptive.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::upstream {

void AdaptiveConcurrency::configure(std::chrono::milliseconds target_ttft, int min, int ceiling,
                              std::chrono::milliseconds interval, Clock::time_point now) {
  std::lock_guard lock(mu_);
  target_ms_ = static_cast<double>(target_ttft.count());
  ceiling_ = std::max(ceiling, 1);
  min_ = std::clamp(min, 1, ceiling_);
  interval_ = interval;
  limit_.store(target_ms_ > 0 ? ceiling_ : 0, std::memory_order_relaxed);
  samples_.clear();
  next_ = 0;
  period_start_ = now;
}

void AdaptiveConcurrency::started(std::int64_t in_flight) noexcept {
  auto peak = peak_.load(std::memory_order_relaxed);
  while (in_flight > peak && !peak_.compare_exchange_weak(peak, in_flight, std::memory_order_relaxed)) {
  }
}

void AdaptiveConcurrency::observe(double ttft_ms) {
  if (ttft_ms < 0 || !on()) return;
  std::lock_guard lock(mu_);
  if (samples_.size() < kMaxSamples) {
    samples_.push_back(ttft_ms);
  } else {
    samples_[next_] = ttft_ms;
    next_ = (next_ + 1) % kMaxSamples;
  }
}

bool AdaptiveConcurrency::tick(Clock::time_point now, std::int64_t in_flight_now) {
  if (!on()) return false;
  std::lock_guard lock(mu_);
  if (now - period_start_ < interval_) return false;
  period_start_ = now;
  const std::int64_t peak = peak_.exchange(in_flight_now, std::memory_order_relaxed);
  if (samples_.size() < kMinSamples) {
    samples_.clear();
    next_ = 0;
    return false;
  }
  const auto k = static_cast<std::size_t>(std::ceil(0.9 * static_cast<double>(samples_.size()))) - 1;
  std::nth_element(samples_.begin(), samples_.begin() + static_cast<std::ptrdiff_t>(k), samples_.end());
  last_p90_ = samples_[k];
  samples_.clear();
  next_ = 0;
  const int was = limit_.load(std::memory_order_relaxed);
  int now_limit = was;
  if (last_p90_ > target_ms_) {
    now_limit = std::max(min_, std::min(was - 1, static_cast<int>(std::floor(was * 0.75))));
    if (now_limit < was) ++decreases_;
  } else if (peak >= was && was < ceiling_) {
    now_limit = was + 1;
    ++increases_;
  }
  limit_.store(now_limit, std::memory_order_relaxed);
  return now_limit != was;
}

AdaptiveConcurrency::Snapshot AdaptiveConcurrency::snapshot() const {
  std::lock_guard lock(mu_);
  return Snapshot{.limit = limit_.load(std::memory_order_relaxed),
                  .last_p90_ms = last_p90_,
                  .decreases = decreases_,
                  .increases = increases_};
}

}  // namespace sluice::upstream
