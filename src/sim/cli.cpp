// `sluice sim`: the simulator as a standalone HTTP server.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstring>
#include <iostream>
#include <pthread.h>

#include "sim/engine.hpp"
#include "sim/sim.hpp"

namespace sluice::sim {

namespace {

// A CLI11 option holding a duration: "250ms", "2s", or integer milliseconds.
CLI::Option* add_duration(CLI::App& app, const std::string& name, std::chrono::milliseconds& target,
                          const std::string& help) {
  auto* opt = app.add_option_function<std::string>(
      name,
      [&target, name](const std::string& v) {
        std::chrono::milliseconds d{};
        if (!parse_duration(v, d))
          throw CLI::ValidationError(name, "not a duration (use 250ms, 2s or integer ms): " + v);
        target = d;
      },
      help + " (default " + std::to_string(target.count()) + "ms)");
  opt->type_name("DURATION");
  return opt;
}

}  // namespace

int run_cli(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "sim") == 0) {
    // Called with the full `sluice sim ...` command line: drop "sim".
    --argc;
    ++argv;
  }
  SimServerOptions o;
  config::SimSettings& s = o.settings;
  std::chrono::milliseconds grace{1000};

  CLI::App app{"sluice sim: an OpenAI / Ollama / Anthropic compatible LLM upstream simulator"};
  app.name("sluice sim");
  app.add_option("--host", o.host, "Listen address")->capture_default_str();
  app.add_option("--port", o.port, "Listen port (0 = a free port)")->capture_default_str();
  app.add_option("--workers", o.workers, "Worker threads")->capture_default_str()->check(CLI::Range(1, 1024));
  app.add_option("--model", o.models, "Served model name for /v1/models and /api/tags (repeatable; default sluice-sim)");
  add_duration(app, "--ttft", s.ttft, "Fixed time to first token");
  app.add_option("--ttft-per-prompt-token", s.ttft_per_prompt_token_ms,
                 "Prefill milliseconds added per prompt token")->capture_default_str();
  add_duration(app, "--inter-token", s.inter_token, "Inter-token latency");
  app.add_option("--jitter", s.jitter, "Each delay is multiplied by 1 + uniform(-jitter, +jitter)")
      ->capture_default_str();
  app.add_option("--max-in-flight", s.max_in_flight, "Sequences decoding at once (GPU slots)")
      ->capture_default_str();
  app.add_option("--max-waiting", s.max_waiting, "Requests queued for a slot; beyond: 503 queue full")
      ->capture_default_str();
  app.add_option("--kv-tokens", s.kv_tokens,
                 "KV-cache capacity in tokens (0: not modelled); GET /metrics reports its use as vLLM does")
      ->capture_default_str();
  app.add_option("--default-output-tokens", s.default_output_tokens,
                 "Output tokens when the request sets no limit")->capture_default_str();
  app.add_option("--max-output-tokens", s.max_output_tokens, "Cap on output tokens")->capture_default_str();
  app.add_option("--error-rate-429", s.error_rate_429, "Probability of a 429 reply")->capture_default_str();
  app.add_option("--error-rate-500", s.error_rate_500, "Probability of a 500 reply")->capture_default_str();
  app.add_option("--error-rate-503", s.error_rate_503, "Probability of a 503 reply")->capture_default_str();
  app.add_option("--abort-rate", s.abort_rate, "Probability that the answer is dropped half-way")
      ->capture_default_str();
  app.add_option("--hang-rate", s.hang_rate, "Probability that a request is never answered")
      ->capture_default_str();
  app.add_option("--slow-first-token-rate", s.slow_first_token_rate,
                 "Probability that the first token is delayed by --slow-first-token")->capture_default_str();
  add_duration(app, "--slow-first-token", s.slow_first_token, "Extra first-token delay of the slow fault");
  app.add_option("--seed", s.seed, "Random seed (0 = random)")->capture_default_str();
  add_duration(app, "--load-time", s.load_time,
               "Loading a model when its load options (num_ctx, num_gpu, num_batch) change or after an unload (0 = always loaded)");
  app.add_option("--layers", s.layers, "Layers of the model; num_gpu of them on the GPU")->capture_default_str();
  app.add_option("--cpu-layer-cost", s.cpu_layer_cost, "Cost of a layer on the CPU, in GPU layers")->capture_default_str();
  app.add_option("--split-cost", s.split_cost, "Extra time per token when layers are split GPU/CPU (fraction)")
      ->capture_default_str();
  app.add_option("--weights-mib", s.weights_mib, "Memory of the weights, MiB (/api/ps)")->capture_default_str();
  app.add_option("--kv-kib-per-token", s.kv_kib_per_token, "KV-cache KiB per token of num_ctx")->capture_default_str();
  app.add_option("--batch-kib", s.batch_kib, "Buffer KiB per unit of num_batch")->capture_default_str();
  add_duration(app, "--shutdown-grace", grace, "Time in-flight requests get after SIGTERM/SIGINT");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (auto msg = validate(s); !msg.empty()) {
    std::cerr << "sluice sim: invalid settings: " << msg << "\n";
    return 2;
  }

  // Block the stop signals before any thread starts so that every thread inherits the
  // mask and only sigwait() below sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  std::unique_ptr<SimServer> server;
  try {
    server = SimServer::start(o);
  } catch (const std::exception& e) {
    std::cerr << "sluice sim: cannot start: " << e.what() << "\n";
    return 1;
  }
  std::cout << "sluice-sim listening on " << o.host << ":" << server->port() << std::endl;

  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  std::cerr << "sluice sim: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", shutting down\n";
  server->shutdown(grace);
  server->join();
  const Stats st = server->stats();
  std::cerr << "sluice sim: " << stats_json(st) << "\n";
  return 0;
}

}  // namespace sluice::sim
