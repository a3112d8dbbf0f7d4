#include "upstream/balancer.hpp"

#include <limits>

namespace sluice::upstream {

Balancer::Balancer(Policy policy, std::vector<int> weights, std::uint64_t seed)
    : policy_(policy),
      weights_(std::move(weights)),
      in_flight_(std::make_unique<std::atomic<std::int64_t>[]>(weights_.size())),
      ttft_(std::make_unique<std::atomic<double>[]>(weights_.size())),
      rng_(seed ? seed : 0x9E3779B97F4A7C15ull),
      current_(weights_.size(), 0) {
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    in_flight_[i].store(0);
    ttft_[i].store(0);
  }
}

bool Balancer::eligible(int i, std::span<const bool> usable, std::uint64_t tried) const noexcept {
  const auto u = static_cast<std::size_t>(i);
  if (u >= weights_.size() || weights_[u] <= 0) return false;
  if (!usable.empty() && (u >= usable.size() || !usable[u])) return false;
  return u >= 64 || !(tried >> u & 1);
}

int Balancer::pick(std::span<const bool> usable, std::uint64_t tried) {
  switch (policy_) {
    case Policy::round_robin: return pick_round_robin(usable, tried);
    case Policy::weighted: return pick_weighted(usable, tried);
    case Policy::least_connections: return pick_least(usable, tried);
    case Policy::latency: return pick_latency(usable, tried);
  }
  return -1;
}

int Balancer::pick_round_robin(std::span<const bool> usable, std::uint64_t tried) {
  const auto n = weights_.size();
  if (n == 0) return -1;
  const auto start = turn_.fetch_add(1, std::memory_order_relaxed) % n;
  for (std::size_t k = 0; k < n; ++k) {
    const int i = static_cast<int>((start + k) % n);
    if (eligible(i, usable, tried)) return i;
  }
  return -1;
}

// nginx's smooth weighted round robin: each pick adds every member's weight to its
// counter, takes the largest and subtracts the total from it. Over any cycle of
// sum(weights) picks each member gets exactly its weight, spread out, not in bursts.
int Balancer::pick_weighted(std::span<const bool> usable, std::uint64_t tried) {
  std::lock_guard lock(mu_);
  std::int64_t total = 0;
  int best = -1;
  for (std::size_t u = 0; u < weights_.size(); ++u) {
    const int i = static_cast<int>(u);
    if (!eligible(i, usable, tried)) continue;
    current_[u] += weights_[u];
    total += weights_[u];
    if (best < 0 || current_[u] > current_[static_cast<std::size_t>(best)]) best = i;
  }
  if (best >= 0) current_[static_cast<std::size_t>(best)] -= total;
  return best;
}

int Balancer::pick_least(std::span<const bool> usable, std::uint64_t tried) {
  const auto n = weights_.size();
  if (n == 0) return -1;
  // Ties go in turn, so equal members share the load from the first request on.
  const auto start = turn_.fetch_add(1, std::memory_order_relaxed) % n;
  int best = -1;
  double best_score = std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < n; ++k) {
    const int i = static_cast<int>((start + k) % n);
    if (!eligible(i, usable, tried)) continue;
    const double score = static_cast<double>(in_flight(i) + 1) / weights_[static_cast<std::size_t>(i)];
    if (score < best_score) {
      best_score = score;
      best = i;
    }
  }
  return best;
}

double Balancer::load(int i) const noexcept {
  const double ttft = ttft_ewma_ms(i);
  // A member without a sample yet looks fast: it gets tried, and learned.
  const double per_request = ttft > 0 ? ttft : 1.0;
  return per_request * static_cast<double>(in_flight(i) + 1) / weights_[static_cast<std::size_t>(i)];
}

// Power of two choices: two members at random, the lighter one wins. Random pairs keep
// instances that share a stale view from all piling onto the same "best" member.
int Balancer::pick_latency(std::span<const bool> usable, std::uint64_t tried) {
  std::vector<int> candidates;
  candidates.reserve(weights_.size());
  for (std::size_t u = 0; u < weights_.size(); ++u) {
    if (eligible(static_cast<int>(u), usable, tried)) candidates.push_back(static_cast<int>(u));
  }
  if (candidates.empty()) return -1;
  if (candidates.size() == 1) return candidates[0];
  auto next = [this] {  // xorshift64*, shared; a lost update only repeats a number
    std::uint64_t x = rng_.load(std::memory_order_relaxed);
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_.store(x, std::memory_order_relaxed);
    return x * 0x2545F4914F6CDD1Dull;
  };
  const auto n = candidates.size();
  const std::size_t a = next() % n;
  std::size_t b = next() % (n - 1);
  if (b >= a) ++b;
  return load(candidates[a]) <= load(candidates[b]) ? candidates[a] : candidates[b];
}

void Balancer::started(int i) noexcept {
  if (i < 0 || static_cast<std::size_t>(i) >= weights_.size()) return;
  in_flight_[static_cast<std::size_t>(i)].fetch_add(1, std::memory_order_relaxed);
}

void Balancer::finished(int i, double ttft_ms) noexcept {
  if (i < 0 || static_cast<std::size_t>(i) >= weights_.size()) return;
  const auto u = static_cast<std::size_t>(i);
  in_flight_[u].fetch_sub(1, std::memory_order_relaxed);
  if (ttft_ms < 0) return;
  double old = ttft_[u].load(std::memory_order_relaxed);
  double next;
  do {
    next = old > 0 ? kEwmaAlpha * ttft_ms + (1 - kEwmaAlpha) * old : ttft_ms;
  } while (!ttft_[u].compare_exchange_weak(old, next, std::memory_order_relaxed));
}

std::int64_t Balancer::in_flight(int i) const noexcept {
  return in_flight_[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
}

double Balancer::ttft_ewma_ms(int i) const noexcept {
  return ttft_[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
}

}  // namespace sluice::upstream
