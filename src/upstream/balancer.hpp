#pragma once
// Choosing a backend of a set (issue: routing and resilience). Pure logic, shared by every
// worker: the counts are atomics, the only lock guards the smooth weighted round robin's
// state. The gateway marks which members are usable (healthy, breaker closed) and which
// this request already tried; a retry never picks a member it tried.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace sluice::upstream {

enum class Policy : std::uint8_t {
  round_robin,        // in turn
  weighted,           // smooth weighted round robin (nginx's): weights hold exactly over each cycle
  least_connections,  // fewest requests in flight, weight-scaled; ties in turn (the default for LLM traffic)
  latency,            // power of two choices on an EWMA of time to first token, in-flight scaled
};

class Balancer {
 public:
  Balancer(Policy policy, std::vector<int> weights, std::uint64_t seed = 0);

  std::size_t size() const noexcept { return weights_.size(); }
  Policy policy() const noexcept { return policy_; }

  // The member to use, or -1 if none is usable and untried. `usable[i]` false excludes i;
  // an empty span means all usable. Bit i of `tried` excludes i (sets up to 64 members).
  int pick(std::span<const bool> usable = {}, std::uint64_t tried = 0);

  // In flight, for least connections and latency: call started() when the request goes to
  // the member and finished() when it ends (ttft_ms < 0: no first token to learn from).
  void started(int i) noexcept;
  void finished(int i, double ttft_ms = -1) noexcept;

  std::int64_t in_flight(int i) const noexcept;
  double ttft_ewma_ms(int i) const noexcept;  // 0 until the first sample

  static constexpr double kEwmaAlpha = 0.2;  // weight of the newest sample

 private:
  bool eligible(int i, std::span<const bool> usable, std::uint64_t tried) const noexcept;
  int pick_round_robin(std::span<const bool> usable, std::uint64_t tried);
  int pick_weighted(std::span<const bool> usable, std::uint64_t tried);
  int pick_least(std::span<const bool> usable, std::uint64_t tried);
  int pick_latency(std::span<const bool> usable, std::uint64_t tried);
  double load(int i) const noexcept;  // latency policy's cost of sending one more to i

  Policy policy_;
  std::vector<int> weights_;
  std::unique_ptr<std::atomic<std::int64_t>[]> in_flight_;
  std::unique_ptr<std::atomic<double>[]> ttft_;
  std::atomic<std::uint64_t> turn_{0};
  std::atomic<std::uint64_t> rng_;
  std::mutex mu_;                     // smooth weighted round robin
  std::vector<std::int64_t> current_;
};

}  // namespace sluice::upstream
