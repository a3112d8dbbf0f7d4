#pragma once
// The upstream simulator: one timing engine (engine.hpp) served over HTTP with the
// OpenAI (chat completions and Responses), Ollama and Anthropic wire formats. Two faces,
// same code: `sluice sim` (run_cli) and the gateway's `simulated` provider, which starts a
// SimServer in its own process on an ephemeral 127.0.0.1 port.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/sim.hpp"

namespace sluice::sim {

// Counters since start (or the last reset) and two gauges. `requests` and `embeddings`
// count arrivals; the outcome counters below them count both kinds of request.
// The options that make Ollama load a model again when they change, with its defaults for
// those a request leaves out.
struct LoadOptions {
  std::int64_t num_ctx = 2048;
  std::int64_t num_gpu = -1;  // layers on the GPU; -1: all
  std::int64_t num_batch = 512;
  bool operator==(const LoadOptions&) const = default;
};

struct Stats {
  std::uint64_t requests = 0;             // every generation request
  std::uint64_t responses = 0;            // of which to the Responses API (POST /v1/responses)
  std::uint64_t embeddings = 0;           // every embeddings request
  std::uint64_t moderations = 0;          // every moderation request (POST /v1/moderations)
  std::uint64_t completed = 0;            // full answer delivered
  std::uint64_t cancelled = 0;            // client went away before the answer was complete
  std::uint64_t errors_429 = 0, errors_500 = 0, errors_503 = 0;  // injected errors
  std::uint64_t aborted = 0;              // stream/answer dropped by the abort fault
  std::uint64_t hung = 0;                 // requests given the hang fault
  std::uint64_t rejected_queue_full = 0;  // 503: max_waiting reached
  std::uint64_t loads = 0;                // models loaded (load_time > 0: a changed option, or after an unload)
  std::int64_t in_flight = 0;             // slots in use (gauge, not reset)
  std::int64_t waiting = 0;               // queued for a slot (gauge, not reset)
  std::int64_t kv_used = 0;               // KV-cache tokens held by running sequences (gauge)
  std::int64_t kv_tokens = 0;             // the KV cache's capacity (0: not modelled)
};

// {"requests":..,...,"in_flight":..,"waiting":..}
std::string stats_json(const Stats& s);

class Engine;  // thread-safe; shared by all worker threads of one simulator

struct SimServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0 = pick a free port
  int workers = 1;
  config::SimSettings settings;
  // Served model names for /v1/models and /api/tags (empty -> "sluice-sim"). Requests
  // may name any model; it is echoed back.
  std::vector<std::string> models;
};

class SimServer {
 public:
  // Binds and starts the worker threads; throws std::system_error when the bind fails
  // and std::invalid_argument when the settings are invalid.
  static std::unique_ptr<SimServer> start(SimServerOptions options);
  ~SimServer();
  SimServer(const SimServer&) = delete;
  SimServer& operator=(const SimServer&) = delete;

  std::uint16_t port() const;
  Stats stats() const;
  Engine& engine();  // e.g. to change settings in-process (same as POST /sim/config)
  // Thread-safe: stops accepting; in-flight requests get at most `grace`.
  void shutdown(std::chrono::milliseconds grace);
  void join();

  struct Impl;

 private:
  explicit SimServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `sluice sim`: parses flags, starts, prints "sluice-sim listening on HOST:PORT" (flushed)
// and runs until SIGTERM/SIGINT; returns the exit code (0 on a clean stop, 2 on bad flags,
// 1 when the server cannot start). argv[0] is the program name; a leading "sim" argument
// (argv[1]) is skipped, so both run_cli(argc, argv) and run_cli(argc - 1, argv + 1) work.
int run_cli(int argc, char** argv);

}  // namespace sluice::sim
