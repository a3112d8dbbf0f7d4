#pragma once
// One backend of a route: the provider, where it is, the model, the credential and the
// simulator settings. What the translation layer (llm/) needs of the configuration.
// Declared in config/sections/models.cpp.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/sim.hpp"

namespace sluice::config {

enum class Provider { simulated, openai, ollama, anthropic };
std::string_view to_string(Provider p) noexcept;

// Where a backend's own load signals are read (docs/routing.md, "Load-aware admission"):
// vLLM's Prometheus endpoint (requests running and waiting, KV-cache usage), or Ollama's
// /api/ps (the memory its loaded models hold, against vram_bytes).
enum class LoadSource : std::uint8_t { none, vllm, ollama };
std::string_view to_string(LoadSource s) noexcept;

struct LoadSignals {
  LoadSource source = LoadSource::none;
  std::string path;  // default: /metrics (vllm), /api/ps (ollama)
  std::chrono::milliseconds interval{1000};
  double max_kv = 0.85;         // from this share of its memory on, the backend takes no new request
  std::int64_t vram_bytes = 0;  // ollama: the memory its models may hold
  bool operator==(const LoadSignals&) const = default;
};

// A backend's in-flight limit that follows its time to first token (docs/routing.md,
// "Adaptive concurrency"): from max_in_flight (the ceiling) down to `min` while its TTFT's
// p90 is above target_ttft, back up one by one while it is under and the limit is reached.
struct AdaptiveLimit {
  std::chrono::milliseconds target_ttft{0};  // 0 = off
  int min = 1;
  std::chrono::milliseconds interval{2000};  // how often the limit is reconsidered
  bool operator==(const AdaptiveLimit&) const = default;
};

struct Backend {
  Provider provider = Provider::simulated;
  std::string base_url;        // e.g. http://127.0.0.1:11434 or https://api.openai.com/v1
  // Derived from base_url at validation time:
  bool tls = false;
  std::string host;
  std::uint16_t port = 0;
  std::string path_prefix;     // "" or "/v1" etc., without trailing '/'
  std::string model;           // real model name sent upstream
  std::string api_key;         // provider credential (resolved from env/file); never logged
  bool tls_verify = true;
  std::string ca_file;         // optional extra CA bundle (PEM)
  SimSettings sim;             // for Provider::simulated
  // Within a route's backend set:
  std::string name;            // label in metrics, logs and /infra; default host:port (host:port/model when the endpoint serves several models; simulated:<alias>[#i])
  int weight = 1;              // for the weighted policies (>= 1)
  int max_in_flight = 0;       // requests in flight to this backend, shared by every route using it (0 = unlimited)
  bool probe = true;           // whether the active health probe runs for it (when health.interval is set)
  // It serves OpenAI's Responses API itself (provider openai): /v1/responses requests are
  // passed to it in their own form (api::Codec::native_on) instead of translated to chat.
  bool native_responses = false;
  LoadSignals load;
  AdaptiveLimit adaptive;

  bool operator==(const Backend&) const = default;
};

}  // namespace sluice::config
