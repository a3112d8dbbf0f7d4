#pragma once
// A sliding window of request outcomes: ten buckets over `window`, each counting requests,
// failures and a latency histogram (three log-spaced bins per doubling from 1 ms, so a
// percentile is known within a factor 2^(1/3)). Adding is O(1) and a summary O(bins): a
// running sum of the live buckets is kept. Not thread-safe: its owner locks.
#include <array>
#include <chrono>
#include <cstdint>

namespace sluice::upstream {

class SlidingWindow {
 public:
  using Clock = std::chrono::steady_clock;

  explicit SlidingWindow(std::chrono::milliseconds window = std::chrono::milliseconds(10'000));

  // One outcome; latency_ms < 0: unknown (counts for the error rate only).
  void add(Clock::time_point now, bool failed, double latency_ms);
  void clear() {
    buckets_ = {};
    sum_ = Bucket{};
  }

  struct Summary {
    std::uint64_t total = 0, failed = 0, timed = 0;
    double error_rate() const { return total ? static_cast<double>(failed) / static_cast<double>(total) : 0; }
    double p95_ms = 0;  // upper bound of the bin holding the 95th percentile; 0 when nothing timed
  };
  Summary summary(Clock::time_point now);
  // total and failed only (no latency): O(1).
  Summary counts(Clock::time_point now) {
    expire(epoch_of(now));
    Summary s;
    s.total = sum_.total;
    s.failed = sum_.failed;
    return s;
  }

  static constexpr std::size_t kBuckets = 10;
  static constexpr std::size_t kBins = 48;  // up to 2^(47/3) ms, about 1 min; above goes in the last
  static std::size_t bin_of(double ms);
  static double bin_upper(std::size_t bin);

 private:
  struct Bucket {
    std::int64_t epoch = -1;  // which slice of time it holds
    std::uint32_t total = 0, failed = 0;
    std::array<std::uint32_t, kBins> latency{};
  };
  std::int64_t epoch_of(Clock::time_point t) const;
  void expire(std::int64_t current);  // drops buckets that left the window from the sum

  Clock::duration slice_;
  std::array<Bucket, kBuckets> buckets_{};
  Bucket sum_;  // the live buckets added up, kept as they change (a summary reads no bucket)
};

}  // namespace sluice::upstream
