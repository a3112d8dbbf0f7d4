#pragma once
// Which load options a backend's model server last got (Ollama reloads the model when
// num_ctx, num_gpu or num_batch change: seconds without a token for every request on it),
// and the reloads seen: a request whose options changed and whose time to first token
// jumped. Shared by every worker: atomics only.
#include <atomic>
#include <cstdint>

#include <boost/json/fwd.hpp>

namespace sluice::upstream {

class ModelLoad {
 public:
  enum class Sent : std::uint8_t {
    none,     // not tracked (not an Ollama backend)
    first,    // nothing answered yet: the model may be loading, for whatever options
    same,     // the options it last answered with: its first token shows the usual time
    changed,  // other options: the server will likely load the model again
  };
  // Before a request goes out with options `sig` (load_signature()).
  Sent classify(std::uint64_t sig) const noexcept {
    const auto now = sig_.load(std::memory_order_relaxed);
    return now == 0 ? Sent::first : now == sig ? Sent::same : Sent::changed;
  }
  // After it: `ok` when the backend answered it (only then is the model loaded with `sig`;
  // a refused connection or an error answer changes nothing), `ttft_ms` its first token's
  // time when it was streamed (else < 0: a whole answer's time says nothing of a load). The
  // `same` ones make the backend's usual time (an average); a `changed` one whose first
  // token took more than twice that, and 100 ms more, is a reload seen.
  void answered(Sent s, std::uint64_t sig, bool ok, double ttft_ms) noexcept;
  std::uint64_t current() const noexcept { return sig_.load(std::memory_order_relaxed); }
  std::uint64_t changes() const noexcept { return changes_.load(std::memory_order_relaxed); }
  std::uint64_t reloads() const noexcept { return reloads_.load(std::memory_order_relaxed); }
  double usual_ms() const noexcept { return usual_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> sig_{0};  // 0: nothing answered yet
  std::atomic<std::uint64_t> changes_{0}, reloads_{0};
  std::atomic<double> usual_{0};  // 0: no `same` first token yet
};

// The load options of a request's `options` object (num_ctx, num_gpu, num_batch; an absent
// one is the server's default, itself a value) as one number, never 0.
struct LoadValues {
  std::int64_t num_ctx = INT64_MIN, num_gpu = INT64_MIN, num_batch = INT64_MIN;  // INT64_MIN: not given
};
std::uint64_t load_signature(const LoadValues& v) noexcept;
// Those of a chat request body's `options` object (Ollama's form).
LoadValues load_values(const boost::json::object& body) noexcept;

}  // namespace sluice::upstream
