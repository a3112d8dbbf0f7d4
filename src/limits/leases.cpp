#include "limits/leases.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace sluice::limits {

using std::chrono::milliseconds;

LeaseTable::Taken LeaseTable::take(std::span<const Check> checks, Admission& a, Clock::time_point now) {
  on_owner_thread();
  Taken t;
  if (checks.size() > kMaxChecks) return t;
  // What each check draws on, found once.
  std::array<Slot*, kMaxChecks> slots{};
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    Slot& s = slot_at(c);
    if (c.kind == Kind::quota) {
      const QuotaLease* q = s.current;
      if (!q || q->avail < c.cost || now >= q->valid_until) return t;
    } else if (s.units.units < c.cost || now >= s.units.valid_until) {
      return t;
    }
    slots[i] = &s;
  }
  t.ok = true;
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    HeaderLimit& h = c.tokens ? a.tokens : a.requests;
    std::int64_t remaining = 0;
    Clock::time_point reset_at;
    bool low = false;
    if (c.kind == Kind::quota) {
      QuotaLease& q = *slots[i]->current;
      q.avail -= c.cost;
      ++q.inflight;
      q.remaining = std::max<std::int64_t>(q.remaining - c.cost, 0);
      remaining = q.remaining;
      reset_at = q.reset_at;
      a.reserved.push_back({{}, c.cost, &q});
      a.reserved_tokens = std::max(a.reserved_tokens, c.cost);
      // A new lease before this one runs out or ends (it is retired then).
      low = q.avail < q.size / 2 || q.valid_until - now < kQuotaLeaseLife / 4;
    } else {
      Units& l = slots[i]->units;
      l.units -= c.cost;
      l.remaining = std::max<std::int64_t>(l.remaining - c.cost, 0);
      remaining = l.remaining;
      reset_at = l.reset_at;
      low = l.units < c.lease / 2;
    }
    if (low && c.lease > 0 && !slots[i]->fetching) {
      slots[i]->fetching = true;  // this request claims the refill
      t.refill |= 1u << i;
    }
    const auto reset = std::chrono::duration_cast<milliseconds>(reset_at - now).count();
    if (!h.set || remaining < h.remaining) h = {true, c.limit, remaining, std::max<std::int64_t>(reset, 0)};
  }
  return t;
}

std::uint32_t LeaseTable::slot(std::string_view key) {
  on_owner_thread();
  return slot_of_key(key);
}

std::uint32_t LeaseTable::slot_of_key(std::string_view key) {
  if (auto it = slot_of_.find(key); it != slot_of_.end()) return it->second;
  const auto n = static_cast<std::uint32_t>(slots_.size());
  slots_.push_back(std::make_unique<Slot>());
  slot_of_.emplace(std::string(key), n);
  return n;
}

std::uint32_t LeaseTable::index(const Check& c) { return c.slot < slots_.size() ? c.slot : slot_of_key(c.key); }

const LeaseTable::Slot* LeaseTable::find(std::string_view key) const {
  auto it = slot_of_.find(key);
  return it == slot_of_.end() ? nullptr : slots_[it->second].get();
}

bool LeaseTable::claim(std::span<const Check> checks) {
  on_owner_thread();
  for (const auto& c : checks) {
    if (slot_at(c).fetching) return false;
  }
  for (const auto& c : checks) slot_at(c).fetching = true;
  return true;
}

void LeaseTable::release(std::span<const Check> checks, std::uint32_t mask) {
  on_owner_thread();
  for (std::size_t i = 0; i < checks.size() && i < 32; ++i) {
    if (mask & (1u << i)) slot_at(checks[i]).fetching = false;
  }
}

void LeaseTable::add(const Check& c, const CheckResult& r, Clock::time_point received) {
  on_owner_thread();
  Units fresh;
  fresh.period = r.period;
  fresh.units = r.leased;
  // What is left for everyone after this request, plus this process's own units.
  fresh.remaining = std::max<std::int64_t>(r.remaining - c.cost - r.leased, 0) + r.leased;
  fresh.reset_at = received + milliseconds(r.reset_ms);
  // A window's units end 50 ms before the window (the reply's travel time); a bucket's
  // after a second, so a lease does not turn a smooth rate into bursts.
  fresh.valid_until = c.kind == Kind::token_bucket ? received + milliseconds(std::min<std::int64_t>(1000, c.window_ms))
                                                   : received + milliseconds(std::max<std::int64_t>(r.reset_ms - 50, 0));
  Units& l = slot_at(c).units;
  if (l.period == fresh.period && Clock::now() < l.valid_until) {
    // The same window: both grants are ours (a refill, or two requests that both asked).
    fresh.remaining += l.units;
    fresh.units += l.units;
    fresh.valid_until = std::max(fresh.valid_until, l.valid_until);
  }
  // Otherwise the old units belong to an earlier window (or expired): they are gone.
  l = fresh;
}

void LeaseTable::add_quota(const Check& c, const CheckResult& r, std::string id, Reserved* first,
                           Clock::time_point received) {
  on_owner_thread();
  const std::int64_t own = first ? c.cost : 0;
  QuotaLease q;
  if (first) {
    q.key = first->key;
  } else {
    q.key.reserve(c.key.size() + 12);
    q.key.append(c.key);
    q.key += ':';
    q.key += std::to_string(r.period);
  }
  q.id = id;
  q.size = own + r.leased;
  q.avail = r.leased;
  q.inflight = first ? 1 : 0;
  q.remaining = std::max<std::int64_t>(r.remaining - own - r.leased, 0) + r.leased;
  q.reset_at = received + milliseconds(r.reset_ms);
  q.valid_until = received + std::min(kQuotaLeaseLife, milliseconds(std::max<std::int64_t>(r.reset_ms - 50, 0)));
  auto [it, fresh] = quota_.try_emplace(std::move(id), std::move(q));
  if (!fresh) return;  // (ids are random: never twice)
  QuotaLease* lease = &it->second;
  if (first) {
    first->key.clear();
    first->lease = lease;
  }
  lease->slot = index(c);
  QuotaLease* old = std::exchange(slots_[lease->slot]->current, lease);
  if (old) retire(*old);  // (may erase it)
}

void LeaseTable::retire(QuotaLease& q) {
  q.retired = true;
  if (q.inflight == 0) give_back(quota_.find(q.id));
}

void LeaseTable::give_back(Map<QuotaLease>::iterator it) {
  QuotaLease& q = it->second;
  released_.push_back({std::move(q.key), q.id, q.size, q.unsent, true});
  if (Slot& s = *slots_[q.slot]; s.current == &q) s.current = nullptr;
  quota_.erase(it);
}

void LeaseTable::settle(const Reserved& r, std::int64_t actual) {
  on_owner_thread();
  QuotaLease& q = *r.lease;
  q.avail += r.amount - actual;
  q.unsent += actual;
  --q.inflight;
  if (q.inflight == 0 && (q.retired || Clock::now() >= q.valid_until)) give_back(quota_.find(q.id));
}

void LeaseTable::drain(std::vector<Pending>& out, Clock::time_point now) {
  on_owner_thread();
  // Ended leases nobody will settle again are given back here.
  for (auto it = quota_.begin(); it != quota_.end();) {
    auto next = std::next(it);
    QuotaLease& q = it->second;
    if (q.inflight == 0 && (q.retired || now >= q.valid_until)) {
      give_back(it);
    } else if (q.unsent > 0) {
      out.push_back({q.key, q.id, q.size, q.unsent, false});
      q.unsent = 0;
    }
    it = next;
  }
  for (auto& p : released_) out.push_back(std::move(p));
  released_.clear();
}

void LeaseTable::forget() {
  on_owner_thread();
  for (auto& s : slots_) {
    s->units = Units{};
    s->current = nullptr;  // (a retired lease hands out nothing more)
  }
  for (auto it = quota_.begin(); it != quota_.end();) {
    auto next = std::next(it);
    retire(it->second);  // (may erase it)
    it = next;
  }
}

bool LeaseTable::busy() const {
  return !quota_.empty() || !released_.empty();
}

std::size_t LeaseTable::quota_leases() const {
  return quota_.size();
}

std::int64_t LeaseTable::units(std::string_view key) const {
  const Slot* s = find(key);
  return !s || Clock::now() >= s->units.valid_until ? 0 : s->units.units;
}

}  // namespace sluice::limits
