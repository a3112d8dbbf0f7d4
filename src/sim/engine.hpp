#pragma once
// The simulator's timing engine: GPU slots with a FIFO wait queue, the delay model,
// fault selection and the counters. Thread-safe; one Engine is shared by every worker
// thread of a simulator. No HTTP here.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <map>
#include <vector>

#include "config/sim.hpp"
#include "sim/sim.hpp"

namespace sluice::sim {

enum class FaultKind { none, error_429, error_500, error_503, abort, hang };
std::string_view to_string(FaultKind k) noexcept;

struct Fault {
  FaultKind kind = FaultKind::none;
  std::int64_t abort_after = -1;              // abort: tokens sent first; -1 = half the output
  std::chrono::milliseconds slow_first_token{0};  // added before the first token
};

// The `x-sim-fault` request header: "error-429" | "error-500" | "error-503" |
// "abort-after=N" | "hang" | "slow-first-token=MS" | "none". Several may be given
// separated by commas (e.g. "slow-first-token=500,abort-after=3"). Returns false and sets
// `error` on an unknown or malformed value.
bool parse_fault_header(std::string_view value, Fault& out, std::string& error);

// Checks ranges: durations >= 0, jitter and rates in [0,1], the error/abort/hang rates
// summing to at most 1, max_in_flight >= 1, max_waiting >= 0, output tokens >= 0.
// Returns "" when valid, else what is wrong.
std::string validate(const config::SimSettings& s);

// {"ttft_ms":..,"ttft_per_prompt_token_ms":..,...,"seed":..}
std::string settings_json(const config::SimSettings& s);

// Applies a JSON object of SimSettings field names (the keys settings_json writes) onto
// `s`. Unknown keys, wrong types and invalid results are errors; on error `s` is unchanged.
bool apply_settings_json(std::string_view json, config::SimSettings& s, std::string& error);

// Durations on the command line: "250ms", "2s", "1.5s", "500us", or integer milliseconds.
bool parse_duration(std::string_view text, std::chrono::milliseconds& out) noexcept;

// Prompt tokens from the total byte length of the message contents: bytes / 4, min 1.
std::int64_t estimate_prompt_tokens(std::size_t content_bytes) noexcept;

// Output length: the request's limit (if any) capped at max_output_tokens, else
// default_output_tokens (also capped). `length_limited` is true when the output is cut by
// a limit (the request's or max_output_tokens) rather than ending naturally — the
// finish_reason "length" / done_reason "length" / stop_reason "max_tokens" case.
struct OutputPlan {
  std::int64_t tokens = 0;
  bool length_limited = false;
};
OutputPlan plan_output(std::optional<std::int64_t> requested, const config::SimSettings& s) noexcept;

// The share of the model's layers on the GPU, 0..1.
double gpu_share(const LoadOptions& o, const config::SimSettings& s) noexcept;
// Time of the prefill and of each token against every layer on the GPU (1): layers on the
// CPU cost cpu_layer_cost each, and a split between both costs split_cost more.
double compute_factor(const LoadOptions& o, const config::SimSettings& s) noexcept;
struct ModelMemory {
  std::int64_t size = 0;  // bytes: weights, KV cache (num_ctx), buffers (num_batch)
  std::int64_t vram = 0;  // the GPU's share of them
};
ModelMemory model_memory(const LoadOptions& o, const config::SimSettings& s) noexcept;

// A model as /api/ps lists it.
struct LoadedModel {
  std::string name;
  LoadOptions options;
  ModelMemory memory;
};

class Engine {
 public:
  explicit Engine(config::SimSettings settings);  // throws std::invalid_argument if invalid
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // A snapshot; each request takes one when it arrives, so updates apply to new requests.
  config::SimSettings settings() const;
  // Replaces the settings (throws std::invalid_argument if invalid). Raising
  // max_in_flight immediately grants slots to waiters. A new non-zero seed reseeds.
  void set_settings(const config::SimSettings& s);
  // POST /sim/config: a JSON object of field names. False + error on a bad update.
  bool update_settings(std::string_view json, std::string& error);

  // Random fault by the rates of `s`: one uniform draw picks at most one of
  // error_429/500/503, abort, hang (in that order, cumulatively); slow first token is
  // drawn independently.
  Fault choose_fault(const config::SimSettings& s);
  // d * (1 + uniform(-jitter, +jitter)), never negative.
  std::chrono::nanoseconds jittered(std::chrono::nanoseconds d, double jitter);

  // RAII ownership of one GPU slot; releasing grants the slot to the oldest waiter.
  class Slot {
   public:
    Slot() = default;
    explicit Slot(Engine* e, std::int64_t kv = 0) : engine_(e), kv_(kv) {}
    Slot(Slot&& o) noexcept : engine_(o.engine_), kv_(o.kv_) { o.engine_ = nullptr; }
    Slot& operator=(Slot&& o) noexcept;
    ~Slot() { release(); }
    void release() noexcept;
    explicit operator bool() const noexcept { return engine_ != nullptr; }

   private:
    Engine* engine_ = nullptr;
    std::int64_t kv_ = 0;  // KV-cache tokens it holds
  };

  // Takes a slot, waiting in FIFO order without blocking the thread (the caller's
  // executor is resumed by whoever releases a slot). Returns nullopt at once when the
  // queue already holds max_waiting requests. Cancellation (e.g. the losing side of
  // `work() || client_gone()`) removes the waiter from the queue; a slot granted at the
  // same moment is released again.
  // `kv`: the KV-cache tokens the sequence holds while it runs (settings().kv_tokens).
  boost::asio::awaitable<std::optional<Slot>> acquire(std::int64_t kv = 0);

  enum class Counter {
    requests, responses, embeddings, moderations, completed, cancelled, errors_429, errors_500, errors_503, aborted, hung,
    rejected_queue_full
  };
  void count(Counter c) noexcept;

  // When `model` can serve with `o` (settings().load_time > 0; else at once): at once if it
  // is loaded with them, else once a load starting now (or after the one in progress) is
  // done. Each load is counted.
  std::chrono::steady_clock::time_point ready_at(const std::string& model, const LoadOptions& o);
  void unload(const std::string& model);
  std::vector<LoadedModel> loaded() const;
  Stats stats() const;
  void reset_stats();  // zeroes the counters; the gauges (in_flight, waiting) stay

  struct Waiter;

 private:
  void release_slot(std::int64_t kv) noexcept;
  bool fits_locked(std::int64_t kv) const noexcept;
  void grant_locked();  // hands free slots to waiters; mu_ held
  void reseed_locked(std::uint64_t seed);

  mutable std::mutex mu_;
  config::SimSettings settings_;
  std::mt19937_64 rng_;
  std::int64_t in_flight_ = 0;
  std::int64_t kv_used_ = 0;
  std::deque<std::shared_ptr<Waiter>> queue_;
  Stats counters_;  // counter fields only; gauges come from in_flight_ / queue_
  struct Model {
    LoadOptions options;
    std::chrono::steady_clock::time_point ready;  // when its load is (was) done
  };
  std::map<std::string, Model, std::less<>> models_;  // loaded models
};

}  // namespace sluice::sim
