#include "upstream/health.hpp"

namespace sluice::upstream {

Health::Health(HealthSettings s) : s_(s) {}

bool Health::usable(Clock::time_point now) const noexcept {
  return healthy_.load(std::memory_order_relaxed) &&
         now.time_since_epoch().count() >= ejected_until_.load(std::memory_order_relaxed);
}

bool Health::probe_result(Clock::time_point now, bool ok, double ms, std::string_view error) {
  std::lock_guard lock(mu_);
  last_probe_ms_ = ms;
  if (ok) {
    ++probes_ok_;
    last_probe_error_.clear();
    probe_streak_ = probe_streak_ > 0 ? probe_streak_ + 1 : 1;
    // A good probe also ends an ejection: the backend answers inference again.
    if (ejected_until_.load(std::memory_order_relaxed) > now.time_since_epoch().count()) {
      ejected_until_.store(0, std::memory_order_relaxed);
      failed_streak_.store(0, std::memory_order_relaxed);
    }
    if (!healthy_.load(std::memory_order_relaxed) && probe_streak_ >= s_.healthy_after) {
      healthy_.store(true, std::memory_order_relaxed);
      ++marked_healthy_;
      return true;
    }
    return false;
  }
  ++probes_failed_;
  last_probe_error_ = std::string(error.substr(0, 200));
  probe_streak_ = probe_streak_ < 0 ? probe_streak_ - 1 : -1;
  if (healthy_.load(std::memory_order_relaxed) && -probe_streak_ >= s_.unhealthy_after) {
    healthy_.store(false, std::memory_order_relaxed);
    ++marked_unhealthy_;
    return true;
  }
  return false;
}

bool Health::request_result(Clock::time_point now, bool failed) {
  if (s_.eject_after <= 0) return false;
  if (!failed) {
    // The common case: no lock, and no write unless a streak was running. A success of an
    // ejected backend (tried when nothing else was left) ends its ejection.
    if (failed_streak_.load(std::memory_order_relaxed) != 0) failed_streak_.store(0, std::memory_order_relaxed);
    if (ejected_until_.load(std::memory_order_relaxed) > now.time_since_epoch().count()) {
      ejected_until_.store(0, std::memory_order_relaxed);
    }
    return false;
  }
  std::lock_guard lock(mu_);
  if (failed_streak_.fetch_add(1, std::memory_order_relaxed) + 1 < s_.eject_after) return false;
  failed_streak_.store(0, std::memory_order_relaxed);
  const auto until = now + s_.eject_for;
  if (ejected_until_.load(std::memory_order_relaxed) >= until.time_since_epoch().count()) return false;
  ejected_until_.store(until.time_since_epoch().count(), std::memory_order_relaxed);
  ++ejections_;
  return true;
}

Health::Snapshot Health::snapshot(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  Snapshot s;
  s.healthy = healthy_.load(std::memory_order_relaxed);
  const auto until = ejected_until_.load(std::memory_order_relaxed);
  s.ejected = now.time_since_epoch().count() < until;
  if (s.ejected) {
    s.ejected_for_ms = std::chrono::duration<double, std::milli>(Clock::duration(until) - now.time_since_epoch()).count();
  }
  s.failed_streak = failed_streak_.load(std::memory_order_relaxed);
  s.probes_ok = probes_ok_;
  s.probes_failed = probes_failed_;
  s.probe_streak = probe_streak_;
  s.last_probe_ms = last_probe_ms_;
  s.last_probe_error = last_probe_error_;
  s.ejections = ejections_;
  s.marked_unhealthy = marked_unhealthy_;
  s.marked_healthy = marked_healthy_;
  return s;
}

}  // namespace sluice::upstream
