#pragma once
// Health of one backend: active probes (a real one-token completion on a timer) and
// passive ejection (consecutive failed requests). Pure logic; time is passed in.
// Thread-safe (one mutex; the data path reads `usable` with one atomic load).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace sluice::upstream {

struct HealthSettings {
  int unhealthy_after = 3;                       // consecutive failed probes -> unhealthy
  int healthy_after = 2;                         // consecutive good probes -> healthy
  int eject_after = 5;                           // consecutive failed requests -> ejected; 0 = never
  std::chrono::milliseconds eject_for{30'000};   // ejected this long (a good probe ends it sooner)
};

class Health {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Health(HealthSettings s = {});

  // Whether requests may go to the backend now: healthy by its probes and not ejected.
  bool usable(Clock::time_point now) const noexcept;
  bool healthy() const noexcept { return healthy_.load(std::memory_order_relaxed); }  // by the probes

  // A probe's outcome. Returns true when it changed the probe verdict (healthy <-> not).
  bool probe_result(Clock::time_point now, bool ok, double ms, std::string_view error = {});
  // A real request's outcome (failed: connect failure, 5xx, timeout, broken stream).
  // Returns true when it ejected the backend.
  bool request_result(Clock::time_point now, bool failed);

  struct Snapshot {
    bool healthy = true;          // by the probes
    bool ejected = false;         // by failed requests, now
    double ejected_for_ms = 0;    // time left
    int failed_streak = 0;        // consecutive failed requests
    std::uint64_t probes_ok = 0, probes_failed = 0;
    int probe_streak = 0;         // > 0: consecutive good probes, < 0: consecutive failed
    double last_probe_ms = -1;    // -1: never probed
    std::string last_probe_error;
    std::uint64_t ejections = 0, marked_unhealthy = 0, marked_healthy = 0;
  };
  Snapshot snapshot(Clock::time_point now) const;

 private:
  HealthSettings s_;
  mutable std::mutex mu_;
  std::atomic<bool> healthy_{true};
  std::atomic<Clock::rep> ejected_until_{0};
  std::atomic<int> failed_streak_{0};
  int probe_streak_ = 0;
  std::uint64_t probes_ok_ = 0, probes_failed_ = 0;
  double last_probe_ms_ = -1;
  std::string last_probe_error_;
  std::uint64_t ejections_ = 0, marked_unhealthy_ = 0, marked_healthy_ = 0;
};

}  // namespace sluice::upstream
