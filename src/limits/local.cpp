#include "limits/local.hpp"

#include <algorithm>
#include <boost/container/small_vector.hpp>
#include <climits>
#include <cmath>
#include <functional>
#include <vector>

namespace sluice::limits {

namespace {

template <class T>
using Small = boost::container::small_vector<T, 8>;

std::int64_t ceil_div_ms(double v) { return static_cast<std::int64_t>(std::ceil(v)); }

std::string quota_key(const Check& c, std::int64_t period) {
  std::string k(c.key);
  k += ':';
  k += std::to_string(period);
  return k;
}

}  // namespace

LocalCounters::Shard& LocalCounters::shard_of(std::string_view key) {
  return shards_[std::hash<std::string_view>{}(key) % kShards];
}

const LocalCounters::Shard& LocalCounters::shard_of(std::string_view key) const {
  return shards_[std::hash<std::string_view>{}(key) % kShards];
}

std::optional<LocalCounters::Quota> LocalCounters::quota(std::string_view key) const {
  const Shard& s = shard_of(key);
  std::lock_guard lock(s.mu);
  auto it = s.counters.find(key);
  if (it == s.counters.end()) return std::nullopt;
  return Quota{it->second.used, it->second.reserved};
}

Verdict LocalCounters::admit(std::span<const Check> checks, std::string_view reservation_id, std::int64_t now) {
  Verdict v;
  v.now_ms = now;
  v.results.resize(checks.size());
  // Every shard involved, locked in one order: the decision is atomic like the script's.
  // (Small vectors: a request has a few checks, and this is on its path.)
  Small<std::size_t> idx, order;
  Small<std::string> quota_keys;  // a quota counter is per period: its key has one
  Small<std::string_view> keys;
  quota_keys.reserve(checks.size());
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    if (c.kind == Kind::quota) {
      quota_keys.push_back(quota_key(c, period_of(c, now).index));
      keys.push_back(quota_keys.back());
    } else {
      keys.push_back(c.key);
    }
    idx.push_back(std::hash<std::string_view>{}(keys[i]) % kShards);
  }
  order = idx;
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  Small<std::unique_lock<std::mutex>> locks;
  for (auto s : order) locks.emplace_back(shards_[s].mu);

  Small<Counter*> ctr(checks.size());
  Small<double> after(checks.size());  // bucket: tokens left if admitted
  bool all_ok = true;
  std::int64_t retry = 0;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    auto& counters = shards_[idx[i]].counters;
    auto found = counters.find(keys[i]);
    if (found == counters.end()) found = counters.emplace(std::string(keys[i]), Counter{}).first;
    Counter& k = found->second;
    ctr[i] = &k;
    const Period p = period_of(c, now);
    CheckResult& r = v.results[i];
    bool ok = false;
    std::int64_t wait = 0;
    const double w = static_cast<double>(c.window_ms);
    switch (c.kind) {
      case Kind::fixed_window: {
        if (k.window != p.index) { k.window = p.index; k.count = 0; }
        ok = k.count + c.cost <= c.limit;
        r.remaining = c.limit - static_cast<std::int64_t>(k.count);
        r.reset_ms = p.ends_ms - now;
        wait = r.reset_ms;
        k.expires_ms = p.ends_ms;
        break;
      }
      case Kind::sliding_window: {
        if (k.window != p.index) {
          k.prev = k.window == p.index - 1 ? k.count : 0;
          k.count = 0;
          k.window = p.index;
        }
        const double elapsed = static_cast<double>(now - p.index * c.window_ms);
        const double est = k.prev * (w - elapsed) / w + k.count;
        ok = est + c.cost <= c.limit;
        r.remaining = static_cast<std::int64_t>(std::floor(c.limit - est));
        r.reset_ms = p.ends_ms - now;
        if (!ok) {
          // When the weighted estimate drops enough; divided last, so whole counts give
          // exact whole milliseconds.
          wait = k.count + c.cost > c.limit
                     ? r.reset_ms + ceil_div_ms(w * (k.count - (c.limit - c.cost)) / k.count)
                     : ceil_div_ms((w * (k.prev - (c.limit - k.count - c.cost)) - elapsed * k.prev) / k.prev);
        }
        k.expires_ms = p.ends_ms + c.window_ms;
        break;
      }
      case Kind::sliding_log: {
        // Entries at or before now - window have left it (the window is (now - w, now]).
        while (k.head < k.log.size() && k.log[k.head] <= now - c.window_ms) ++k.head;
        if (k.head > 64 && k.head * 2 > k.log.size()) {
          k.log.erase(k.log.begin(), k.log.begin() + static_cast<std::ptrdiff_t>(k.head));
          k.head = 0;
        }
        const auto cur = static_cast<std::int64_t>(k.log.size() - k.head);
        ok = cur + c.cost <= c.limit;
        r.remaining = c.limit - cur;
        // Until the oldest entry leaves (this request's own, if the log was empty).
        r.reset_ms = cur > 0 ? k.log[k.head] + c.window_ms - now : c.window_ms;
        if (!ok) {
          // Until enough entries have left for this request's cost.
          const auto need = cur + c.cost - c.limit;  // entries that must leave, >= 1
          wait = need <= cur ? k.log[k.head + static_cast<std::size_t>(need - 1)] + c.window_ms - now : c.window_ms;
        }
        k.expires_ms = now + c.window_ms;
        break;
      }
      case Kind::token_bucket: {
        const double cap = static_cast<double>(c.extra);
        if (k.window == -1) { k.window = 0; k.count = cap; k.ts = now; }
        if (now > k.ts) {
          k.count = std::min(cap, k.count + static_cast<double>(now - k.ts) * c.limit / w);
          k.ts = now;
        }
        ok = k.count >= c.cost;
        after[i] = k.count - (ok ? c.cost : 0);
        r.remaining = static_cast<std::int64_t>(std::floor(k.count));
        r.reset_ms = ceil_div_ms((cap - after[i]) * w / c.limit);
        if (!ok) wait = ceil_div_ms((c.cost - k.count) * w / c.limit);
        k.expires_ms = now + r.reset_ms + 1000;
        break;
      }
      case Kind::quota: {
        // Reservations whose request never settled are released when they expire.
        if (k.next_expiry != 0 && k.next_expiry <= now) {
          k.next_expiry = 0;
          for (auto it = k.holds.begin(); it != k.holds.end();) {
            if (it->second.second <= now) {
              k.reserved = std::max<std::int64_t>(0, k.reserved - it->second.first);
              it = k.holds.erase(it);
            } else {
              if (k.next_expiry == 0 || it->second.second < k.next_expiry) k.next_expiry = it->second.second;
              ++it;
            }
          }
        }
        // (Compared without summing: no overflow whatever the counters hold.)
        ok = c.cost <= c.limit && k.used <= c.limit - c.cost && k.reserved <= c.limit - c.cost - k.used;
        r.remaining = k.used >= c.limit ? 0 : std::max<std::int64_t>(0, c.limit - k.used - std::min(k.reserved, c.limit));
        r.reset_ms = p.ends_ms - now;
        r.period = p.index;
        wait = r.reset_ms;
        k.expires_ms = std::max(k.expires_ms, p.ends_ms + c.extra);
        break;
      }
    }
    if (!ok) {
      if (all_ok) v.denied = static_cast<int>(i);
      all_ok = false;
      retry = std::max(retry, wait);
    }
  }
  v.allowed = all_ok;
  v.retry_after_ms = all_ok ? 0 : std::max<std::int64_t>(retry, 1);
  if (!all_ok) return v;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    Counter& k = *ctr[i];
    switch (c.kind) {
      case Kind::fixed_window:
      case Kind::sliding_window: k.count += c.cost; break;
      case Kind::token_bucket: k.count = after[i]; break;
      case Kind::sliding_log:
        // (Kept in order if the clock stepped back: an entry is never older than the last.)
        k.log.insert(k.log.end(), static_cast<std::size_t>(c.cost), k.log.empty() ? now : std::max(now, k.log.back()));
        break;
      case Kind::quota: {
        auto [it, fresh] = k.holds.try_emplace(std::string(reservation_id), c.cost, now + c.extra);
        if (fresh) {
          k.reserved = k.reserved > INT64_MAX - c.cost ? INT64_MAX : k.reserved + c.cost;
          if (k.next_expiry == 0 || now + c.extra < k.next_expiry) k.next_expiry = now + c.extra;
        }
        break;
      }
    }
  }
  return v;
}

void LocalCounters::settle(const Reserved& r, std::string_view reservation_id, std::int64_t actual, std::int64_t now) {
  Shard& s = shard_of(r.key);
  std::lock_guard lock(s.mu);
  auto it = s.counters.find(r.key);
  if (it == s.counters.end()) return;  // the period is over and gone
  Counter& k = it->second;
  if (auto h = k.holds.find(reservation_id); h != k.holds.end()) {
    // (next_expiry may now be early: the next scan finds nothing expired and moves it.)
    k.reserved = std::max<std::int64_t>(0, k.reserved - h->second.first);
    k.holds.erase(h);
  }
  const std::int64_t add = std::max<std::int64_t>(0, actual);
  k.used = k.used > INT64_MAX - add ? INT64_MAX : k.used + add;
  (void)now;
}

void LocalCounters::sweep(std::int64_t now) {
  for (auto& s : shards_) {
    std::lock_guard lock(s.mu);
    std::erase_if(s.counters, [now](const auto& kv) { return kv.second.expires_ms != 0 && kv.second.expires_ms < now; });
  }
}

std::size_t LocalCounters::size() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard lock(s.mu);
    n += s.counters.size();
  }
  return n;
}

}  // namespace sluice::limits
