#pragma once
// A circuit breaker for one backend (or one provider): opens on the error rate over a
// sliding window, or on the window's P95 latency (time to first token, or total time)
// above a threshold; after `open_for` it lets `half_open_probes` requests through, and
// closes when they all succeed (fast enough), or opens again on the first failure. With
// `recover_for`, recovery has hysteresis: half-open lets `half_open_share` of the
// requests through for at least recover_for and closes only when their P95 is at or
// under p95_recover_ms (below the opening threshold); above the opening threshold (or on
// a failure) it opens again; in between it stays half-open.
// Pure logic; time is passed in, so tests need no clock. Thread-safe (one mutex).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <deque>
#include <utility>
#include <vector>

#include "upstream/window.hpp"

namespace sluice::upstream {

struct BreakerSettings {
  std::chrono::milliseconds window{10'000};     // the sliding window (10 buckets)
  std::uint32_t min_requests = 20;               // no decision on fewer requests in the window
  double error_rate = 0.5;                       // open at or above this fraction of failures; 0 = never
  double p95_latency_ms = 0;                     // open when the window's P95 is above this; 0 = never
  std::chrono::milliseconds open_for{5'000};     // then half-open
  std::uint32_t half_open_probes = 3;            // requests let through while half-open
  std::chrono::milliseconds recover_for{0};      // > 0: recovery with hysteresis (above)
  double p95_recover_ms = 0;                     // 0: p95_latency_ms
  double half_open_share = 0.1;
};

class Breaker {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State : std::uint8_t { closed, open, half_open };

  explicit Breaker(BreakerSettings s = {});

  // Whether a request may go now. While half-open only `half_open_probes` requests get a
  // pass, each marked as a probe of the current round; the caller hands the pass back
  // with record() (its outcome) or release() (no outcome: the request never went, or its
  // client left). A round whose outcomes never came is renewed after open_for.
  struct Pass {
    bool ok = false;
    bool probe = false;         // a half-open probe
    std::uint32_t round = 0;    // which half-open round it belongs to
    explicit operator bool() const noexcept { return ok; }
  };
  Pass allow(Clock::time_point now);
  // An outcome: failed (connect failure, 5xx, timeout...) and its latency in ms (< 0:
  // unknown, counts for the error rate only). While half-open only the current round's
  // probes count; outcomes of requests admitted earlier are ignored, as while open.
  void record(Clock::time_point now, bool failed, double latency_ms, Pass pass);
  void record(Clock::time_point now, bool failed, double latency_ms);  // admitted while closed
  void release(Pass pass);

  State state(Clock::time_point now);
  // Transitions so far, for the metrics and the log.
  struct Counts {
    std::uint64_t opened = 0, half_opened = 0, closed = 0;
  };
  Counts counts() const;
  // Why it last opened ("error rate 0.62 over 40 requests", "p95 2150 ms over 40 requests").
  std::string last_reason() const;

 private:
  void evaluate(Clock::time_point now);
  void open(Clock::time_point now);
  void advance(Clock::time_point now);  // open -> half_open once open_for has passed

  BreakerSettings s_;
  mutable std::mutex mu_;
  State state_ = State::closed;
  std::atomic<State> seen_{State::closed};  // state_ as of the last change, read without the lock
  Clock::time_point opened_at_{};
  std::uint32_t probes_sent_ = 0, probes_ok_ = 0;
  std::uint32_t round_ = 0;  // half-open rounds so far
  Clock::time_point probe_at_{};  // the last half-open probe let through
  // Recovery with hysteresis: when half-open began, the share's credit, the latencies seen.
  Clock::time_point half_open_at_{};
  double credit_ = 0;
  std::deque<std::pair<Clock::time_point, double>> recovering_;  // the last recover_for's
  bool recover_step(Clock::time_point now, bool failed, double latency_ms);
  SlidingWindow window_;
  Counts counts_;
  char reason_[96] = {0};
};

std::string_view to_string(Breaker::State s) noexcept;

}  // namespace sluice::upstream
