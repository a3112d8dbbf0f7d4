#pragma once
// Timing model and fault injection of the simulator (both faces: `sluice sim` and the
// in-process `simulated` provider). Declared in config/sections/models.cpp.
#include <chrono>
#include <cstdint>

namespace sluice::config {

using Millis = std::chrono::milliseconds;

struct SimSettings {
  Millis ttft{200};                 // fixed part of time to first token
  double ttft_per_prompt_token_ms = 0.0;  // prefill cost, added per prompt token
  Millis inter_token{20};           // inter-token latency
  double jitter = 0.1;              // +/- fraction applied to each delay
  int max_in_flight = 64;           // sequences decoding at once ("GPU slots")
  int max_waiting = 1024;           // queue beyond that; past it -> 503
  // The KV cache, in tokens (0: not modelled): a sequence holds its prompt and its planned
  // output there while it decodes, and waits for room; GET /metrics reports the use in
  // vLLM's names (docs/simulator.md, "Load signals").
  std::int64_t kv_tokens = 0;
  int default_output_tokens = 32;   // when the request sets no max_tokens/num_predict
  int max_output_tokens = 4096;
  // Fault injection, each a probability in [0,1] per request.
  double error_rate_429 = 0, error_rate_500 = 0, error_rate_503 = 0;
  double abort_rate = 0;            // stream aborted mid-way (connection dropped)
  double hang_rate = 0;             // accepts, then never answers
  double slow_first_token_rate = 0; // first token delayed by slow_first_token
  Millis slow_first_token{5000};
  std::uint64_t seed = 0;           // 0 = random
  // Model loading, as Ollama does it (docs/simulator.md, "Load options"). A model is
  // (re)loaded when a request's load options (num_ctx, num_gpu, num_batch) differ from
  // those it is loaded with, or after it was unloaded (keep_alive 0): that takes
  // load_time, before any of its requests gets a token. 0 = always loaded.
  Millis load_time{0};
  int layers = 24;                  // num_gpu of them on the GPU (-1: all)
  double cpu_layer_cost = 2.5;      // a layer on the CPU takes this many times a GPU one
  double split_cost = 0.1;          // extra time per token when the layers are split
  double weights_mib = 400;         // memory of the weights
  double kv_kib_per_token = 12.8;   // KV cache per token of num_ctx
  double batch_kib = 69;            // buffers per unit of num_batch

  bool operator==(const SimSettings&) const = default;
};

}  // namespace sluice::config
