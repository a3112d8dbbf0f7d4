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

void SlidingWindow::add(Clock::time_point now, bool failed, double latency_ms) {
  const auto e = epoch_of(now);
  Bucket& b = buckets_[static_cast<std::size_t>(e) % kBuckets];
  if (b.epoch != e) b = Bucket{e};
  ++b.total;
  if (failed) ++b.failed;
  if (latency_ms >= 0) ++b.latency[bin_of(latency_ms)];
}

SlidingWindow::Summary SlidingWindow::summary(Clock::time_point now) const {
  const auto current = epoch_of(now);
  Summary s;
  std::array<std::uint64_t, kBins> hist{};
  for (const auto& b : buckets_) {
    if (b.epoch < 0 || b.epoch <= current - static_cast<std::int64_t>(kBuckets) || b.epoch > current) continue;
    s.total += b.total;
    s.failed += b.failed;
    for (std::size_t i = 0; i < kBins; ++i) {
      hist[i] += b.latency[i];
      s.timed += b.latency[i];
    }
  }
  if (s.timed > 0) {
    const auto rank = static_cast<std::uint64_t>(std::ceil(0.95 * static_cast<double>(s.timed)));
    std::uint64_t cum = 0;
    for (std::size_t i = 0; i < kBins; ++i) {
      cum += hist[i];
      if (cum >= rank) {
        s.p95_ms = bin_upper(i);
        break;
      }
    }
  }
  return s;
}

}  // namespace sluice::upstream
