#include "upstream/breaker.hpp"

#include <algorithm>
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

Breaker::Breaker(BreakerSettings s) : s_(s), window_(s.window) {}

void Breaker::open(Clock::time_point now) {
  state_ = State::open;
  seen_.store(state_, std::memory_order_relaxed);
  opened_at_ = now;
  ++counts_.opened;
}

void Breaker::advance(Clock::time_point now) {
  if (state_ == State::open && now - opened_at_ >= s_.open_for) {
    state_ = State::half_open;
    seen_.store(state_, std::memory_order_relaxed);
    probes_sent_ = probes_ok_ = 0;
    ++round_;
    ++counts_.half_opened;
    half_open_at_ = now;
    credit_ = 0;
    recovering_.clear();
  }
}

// Half-open with hysteresis: one outcome of a request let through. True when it ended the
// half-open state (closed or opened again).
bool Breaker::recover_step(Clock::time_point now, bool failed, double latency_ms) {
  if (failed) {
    std::snprintf(reason_, sizeof reason_, "a request failed while recovering");
    open(now);
    return true;
  }
  // The P95 of the last recover_for: it must stay under the lower threshold that long.
  if (latency_ms >= 0) recovering_.emplace_back(now, latency_ms);
  while (!recovering_.empty() && (now - recovering_.front().first > s_.recover_for || recovering_.size() > 10000)) {
    recovering_.pop_front();
  }
  if (recovering_.size() < std::max<std::uint32_t>(s_.half_open_probes, 1)) return false;
  std::vector<double> v;
  v.reserve(recovering_.size());
  for (const auto& [at, ms] : recovering_) v.push_back(ms);
  const std::size_t k = std::min(v.size() - 1, static_cast<std::size_t>(0.95 * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  const double p95 = v[k];
  if (s_.p95_latency_ms > 0 && p95 > s_.p95_latency_ms) {
    std::snprintf(reason_, sizeof reason_, "p95 %.0f ms while recovering over %zu requests", p95, v.size());
    open(now);
    return true;
  }
  const double recover = s_.p95_recover_ms > 0 ? s_.p95_recover_ms : s_.p95_latency_ms;
  if (now - half_open_at_ < s_.recover_for || (recover > 0 && p95 > recover)) return false;  // the band: stay
  state_ = State::closed;
  seen_.store(state_, std::memory_order_relaxed);
  ++counts_.closed;
  window_.clear();
  return true;
}

Breaker::Pass Breaker::allow(Clock::time_point now) {
  if (seen_.load(std::memory_order_relaxed) == State::closed) return {true, false, 0};  // the common case, lock-free
  std::lock_guard lock(mu_);
  advance(now);
  switch (state_) {
    case State::closed: return {true, false, 0};
    case State::open: return {};
    case State::half_open:
      if (s_.recover_for.count() > 0) {
        // A share of the requests, evenly: every 1/share-th.
        credit_ += s_.half_open_share;
        if (credit_ < 1.0) return {};
        credit_ -= 1.0;
        return {true, true, round_};
      }
      if (probes_sent_ >= s_.half_open_probes) {
        if (now - probe_at_ < s_.open_for) return {};
        ++round_;  // the missing outcomes are lost: a new round, as many probes again
        probes_sent_ = probes_ok_ = 0;
      }
      ++probes_sent_;
      probe_at_ = now;
      return {true, true, round_};
  }
  return {};
}

void Breaker::record(Clock::time_point now, bool failed, double latency_ms) {
  record(now, failed, latency_ms, Pass{true, false, 0});
}

void Breaker::release(Pass pass) {
  if (!pass.probe) return;
  std::lock_guard lock(mu_);
  if (state_ == State::half_open && pass.round == round_ && probes_sent_ > probes_ok_) --probes_sent_;
}

void Breaker::record(Clock::time_point now, bool failed, double latency_ms, Pass pass) {
  std::lock_guard lock(mu_);
  advance(now);
  const bool slow = s_.p95_latency_ms > 0 && latency_ms > s_.p95_latency_ms;
  if (state_ == State::half_open) {
    if (!pass.probe || pass.round != round_) return;  // admitted before, or an older round
    if (s_.recover_for.count() > 0) {
      recover_step(now, failed, latency_ms);
      return;
    }
    if (failed || slow) {
      std::snprintf(reason_, sizeof reason_, "a half-open probe %s", failed ? "failed" : "was slow");
      open(now);
    } else if (++probes_ok_ >= s_.half_open_probes) {
      state_ = State::closed;
      seen_.store(state_, std::memory_order_relaxed);
      ++counts_.closed;
      window_.clear();  // a fresh window: the old failures are what opened it
    }
    return;
  }
  if (state_ == State::open || pass.probe) return;  // admitted before it opened; or a late probe
  window_.add(now, failed, latency_ms);
  // A fast success can only open it by the error rate (reaching min_requests): that is
  // checked on the counts alone, without the latency summary.
  if (!failed && !slow) {
    const auto c = window_.counts(now);
    if (c.total < s_.min_requests || s_.error_rate <= 0 || c.error_rate() < s_.error_rate) return;
  }
  evaluate(now);
}

void Breaker::evaluate(Clock::time_point now) {
  const auto w = window_.summary(now);
  if (w.total < s_.min_requests) return;
  if (s_.error_rate > 0 && w.error_rate() >= s_.error_rate) {
    std::snprintf(reason_, sizeof reason_, "error rate %.2f over %llu requests", w.error_rate(),
                  static_cast<unsigned long long>(w.total));
    open(now);
    return;
  }
  if (s_.p95_latency_ms > 0 && w.timed >= s_.min_requests && w.p95_ms > s_.p95_latency_ms) {
    std::snprintf(reason_, sizeof reason_, "p95 %.0f ms over %llu requests", w.p95_ms,
                  static_cast<unsigned long long>(w.timed));
    open(now);
  }
}

Breaker::State Breaker::state(Clock::time_point now) {
  if (seen_.load(std::memory_order_relaxed) == State::closed) return State::closed;
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
