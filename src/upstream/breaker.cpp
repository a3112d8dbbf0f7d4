#include "upstream/breaker.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace sluice::upstream {

std::string_view to_string(Breaker::State s) noexcept {
  switch (s) {
    case Breaker::State::closed: return "closed";
    case Breaker::State::open: return "open";
    case Breaker::State::half_open: return "half_open";
  }
  return "?";
}

Breaker::Breaker(BreakerSettings s) : s_(s) {
  if (s_.window.count() < static_cast<std::int64_t>(kBuckets)) s_.window = std::chrono::milliseconds(kBuckets);
}

// Three bins per doubling from 1 ms: bin b holds latencies up to 2^(b/3) ms (the last bin
// everything above ~1 min). The P95 is then known within 26 %.
std::size_t Breaker::bin_of(double ms) {
  if (ms <= 1) return 0;
  const auto b = static_cast<std::size_t>(std::ceil(3 * std::log2(ms)));
  return std::min(b, kBins - 1);
}

double Breaker::bin_upper(std::size_t bin) { return std::exp2(static_cast<double>(bin) / 3); }

std::int64_t Breaker::epoch_of(Clock::time_point t) const {
  const auto slice = std::chrono::duration_cast<Clock::duration>(s_.window) / static_cast<std::int64_t>(kBuckets);
  return t.time_since_epoch() / slice;
}

Breaker::Bucket& Breaker::bucket_at(Clock::time_point t) {
  const auto e = epoch_of(t);
  Bucket& b = buckets_[static_cast<std::size_t>(e) % kBuckets];
  if (b.epoch != e) b = Bucket{e};
  return b;
}

void Breaker::open(Clock::time_point now) {
  state_ = State::open;
  opened_at_ = now;
  ++counts_.opened;
}

void Breaker::advance(Clock::time_point now) {
  if (state_ == State::open && now - opened_at_ >= s_.open_for) {
    state_ = State::half_open;
    probes_sent_ = probes_ok_ = 0;
    ++counts_.half_opened;
  }
}

bool Breaker::allow(Clock::time_point now) {
  std::lock_guard lock(mu_);
  advance(now);
  switch (state_) {
    case State::closed: return true;
    case State::open: return false;
    case State::half_open:
      if (probes_sent_ >= s_.half_open_probes) return false;
      ++probes_sent_;
      return true;
  }
  return false;
}

void Breaker::record(Clock::time_point now, bool failed, double latency_ms) {
  std::lock_guard lock(mu_);
  advance(now);
  const bool slow = s_.p95_latency_ms > 0 && latency_ms > s_.p95_latency_ms;
  if (state_ == State::half_open) {
    if (failed || slow) {
      std::snprintf(reason_, sizeof reason_, "a half-open probe %s", failed ? "failed" : "was slow");
      open(now);
    } else if (++probes_ok_ >= s_.half_open_probes) {
      state_ = State::closed;
      ++counts_.closed;
      buckets_ = {};  // a fresh window: the old failures are what opened it
    }
    return;
  }
  if (state_ == State::open) return;  // outcomes of requests that started before it opened
  Bucket& b = bucket_at(now);
  ++b.total;
  if (failed) ++b.failed;
  if (latency_ms >= 0) ++b.latency[bin_of(latency_ms)];
  evaluate(now);
}

void Breaker::evaluate(Clock::time_point now) {
  const auto current = epoch_of(now);
  std::uint64_t total = 0, failed = 0, timed = 0;
  std::array<std::uint64_t, kBins> hist{};
  for (const auto& b : buckets_) {
    if (b.epoch < 0 || b.epoch <= current - static_cast<std::int64_t>(kBuckets)) continue;
    total += b.total;
    failed += b.failed;
    for (std::size_t i = 0; i < kBins; ++i) {
      hist[i] += b.latency[i];
      timed += b.latency[i];
    }
  }
  if (total < s_.min_requests) return;
  const double rate = static_cast<double>(failed) / static_cast<double>(total);
  if (s_.error_rate > 0 && rate >= s_.error_rate) {
    std::snprintf(reason_, sizeof reason_, "error rate %.2f over %llu requests", rate,
                  static_cast<unsigned long long>(total));
    open(now);
    return;
  }
  if (s_.p95_latency_ms > 0 && timed >= s_.min_requests) {
    const auto rank = static_cast<std::uint64_t>(std::ceil(0.95 * static_cast<double>(timed)));
    std::uint64_t cum = 0;
    for (std::size_t i = 0; i < kBins; ++i) {
      cum += hist[i];
      if (cum >= rank) {
        const double p95 = bin_upper(i);
        if (p95 > s_.p95_latency_ms) {
          std::snprintf(reason_, sizeof reason_, "p95 %.0f ms over %llu requests", p95,
                        static_cast<unsigned long long>(timed));
          open(now);
        }
        break;
      }
    }
  }
}

Breaker::State Breaker::state(Clock::time_point now) {
  std::lock_guard lock(mu_);
  advance(now);
  return state_;
}

Breaker::Counts Breaker::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

std::string Breaker::last_reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

}  // namespace sluice::upstream
