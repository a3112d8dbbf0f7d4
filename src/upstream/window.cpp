#include "upstream/window.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::upstream {

SlidingWindow::SlidingWindow(std::chrono::milliseconds window)
    : slice_(std::max<Clock::duration>(std::chrono::duration_cast<Clock::duration>(window) /
                                           static_cast<std::int64_t>(kBuckets),
                                       std::chrono::milliseconds(1))) {}

std::size_t SlidingWindow::bin_of(double ms) {
  if (ms <= 1) return 0;
  const auto b = static_cast<std::size_t>(std::ceil(3 * std::log2(ms)));
  return std::min(b, kBins - 1);
}

double SlidingWindow::bin_upper(std::size_t bin) { return std::exp2(static_cast<double>(bin) / 3); }

std::int64_t SlidingWindow::epoch_of(Clock::time_point t) const { return t.time_since_epoch() / slice_; }

void SlidingWindow::expire(std::int64_t current) {
  for (auto& b : buckets_) {
    // (A bucket newer than `current` stays: callers' clocks are read before their lock.)
    if (b.epoch < 0 || b.epoch > current - static_cast<std::int64_t>(kBuckets)) continue;
    sum_.total -= b.total;
    sum_.failed -= b.failed;
    for (std::size_t i = 0; i < kBins; ++i) sum_.latency[i] -= b.latency[i];
    b = Bucket{};
  }
}

void SlidingWindow::add(Clock::time_point now, bool failed, double latency_ms) {
  const auto e = epoch_of(now);
  expire(e);
  Bucket& b = buckets_[static_cast<std::size_t>(e) % kBuckets];
  if (b.epoch < 0) b.epoch = e;  // an older epoch in this slot was expired above
  ++b.total;
  ++sum_.total;
  if (failed) {
    ++b.failed;
    ++sum_.failed;
  }
  if (latency_ms >= 0) {
    const auto bin = bin_of(latency_ms);
    ++b.latency[bin];
    ++sum_.latency[bin];
  }
}

SlidingWindow::Summary SlidingWindow::summary(Clock::time_point now) {
  expire(epoch_of(now));
  Summary s;
  s.total = sum_.total;
  s.failed = sum_.failed;
  for (std::size_t i = 0; i < kBins; ++i) s.timed += sum_.latency[i];
  if (s.timed > 0) {
    const auto rank = static_cast<std::uint64_t>(std::ceil(0.95 * static_cast<double>(s.timed)));
    std::uint64_t cum = 0;
    for (std::size_t i = 0; i < kBins; ++i) {
      cum += sum_.latency[i];
      if (cum >= rank) {
        s.p95_ms = bin_upper(i);
        break;
      }
    }
  }
  return s;
}

}  // namespace sluice::upstream
