// Routes (`models`): each entry maps a client-facing alias to one or more backends, in
// the short form (the backend keys at the route's top level) or the long form (a
// `backends:` list). The keys of a route, of a backend and of the simulator are declared
// once, in the tables below; the provider-dependent keys of a backend (base_url, the
// credential, sim) and the checks across routes are code.
#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <string>

#include "common/text.hpp"
#include "config/schema.hpp"

namespace sluice::config::detail {

namespace {

const Enum<Provider>& provider_enum() {
  static const Enum<Provider> e{"provider",
                                {{"simulated", Provider::simulated},
                                 {"openai", Provider::openai},
                                 {"ollama", Provider::ollama},
                                 {"anthropic", Provider::anthropic}}};
  return e;
}

const Enum<Balance>& balance_enum() {
  static const Enum<Balance> e{"balance",
                               {{"round_robin", Balance::round_robin},
                                {"weighted", Balance::weighted},
                                {"least_connections", Balance::least_connections},
                                {"latency", Balance::latency}}};
  return e;
}

const Table<SimSettings>& sim_table() {
  const Millis zero{0};
  static const Table<SimSettings> t{
      "models[].sim",
      {
          duration("ttft", &SimSettings::ttft, zero, "Fixed time to first token."),
          number("ttft_per_prompt_token", &SimSettings::ttft_per_prompt_token_ms, 0, 1e6,
                 "Prefill cost in milliseconds, added per prompt token."),
          duration("inter_token", &SimSettings::inter_token, zero, "Delay between tokens."),
          number("jitter", &SimSettings::jitter, 0, 1, "± fraction applied to each delay."),
          integer("max_in_flight", &SimSettings::max_in_flight, 1, 1'000'000, "Sequences decoding at once."),
          integer("max_waiting", &SimSettings::max_waiting, 0, 10'000'000,
                  "Queue beyond `max_in_flight`; past it → 503."),
          integer("kv_tokens", &SimSettings::kv_tokens, 0, 1'000'000'000,
                  "KV-cache capacity in tokens (0: not modelled): a sequence holds its prompt and planned output "
                  "while it decodes and waits for room; `/metrics` reports the use in vLLM's names."),
          integer("default_output_tokens", &SimSettings::default_output_tokens, 1, 10'000'000,
                  "Output length when the request sets none; at most `max_output_tokens`."),
          integer("max_output_tokens", &SimSettings::max_output_tokens, 1, 10'000'000, "Output cap."),
          number("error_rate_429", &SimSettings::error_rate_429, 0, 1, "Probability of a 429 answer."),
          number("error_rate_500", &SimSettings::error_rate_500, 0, 1, "Probability of a 500 answer."),
          number("error_rate_503", &SimSettings::error_rate_503, 0, 1, "Probability of a 503 answer."),
          number("abort_rate", &SimSettings::abort_rate, 0, 1, "Probability of a stream cut mid-way."),
          number("hang_rate", &SimSettings::hang_rate, 0, 1, "Probability of never answering."),
          number("slow_first_token_rate", &SimSettings::slow_first_token_rate, 0, 1,
                 "Probability of a first token delayed by `slow_first_token`."),
          duration("slow_first_token", &SimSettings::slow_first_token, zero, "That delay."),
          duration("load_time", &SimSettings::load_time, zero,
                   "Loading a model, as Ollama does when a request's `num_ctx`, `num_gpu` or `num_batch` differs "
                   "from those it is loaded with, or after an unload (`keep_alive: 0`): no token of that model "
                   "before it is done. 0 = always loaded."),
          integer("layers", &SimSettings::layers, 1, 100000, "The model's layers; `num_gpu` of them run on the GPU (-1: all)."),
          number("cpu_layer_cost", &SimSettings::cpu_layer_cost, 1, 1e6,
                 "A layer on the CPU takes this many times a GPU one (prefill and each token)."),
          number("split_cost", &SimSettings::split_cost, 0, 1e6,
                 "Extra time per token, as a fraction, when the layers are split between GPU and CPU."),
          number("weights_mib", &SimSettings::weights_mib, 0, 1e9, "Memory of the weights (`/api/ps`)."),
          number("kv_kib_per_token", &SimSettings::kv_kib_per_token, 0, 1e9, "KV-cache memory per token of `num_ctx`."),
          number("batch_kib", &SimSettings::batch_kib, 0, 1e9, "Buffer memory per unit of `num_batch`."),
          custom<SimSettings>("seed", "integer", "0", "0–18446744073709551615; 0 = random.",
                              [](Loader& l, const YAML::Node& n, const std::string& p, SimSettings& s) {
                                std::string text;
                                if (!l.scalar(n, p, "an integer", text)) return false;
                                std::uint64_t seed = 0;
                                if (!sluice::parse_u64(trim(text), seed)) {
                                  l.fail(p, n, "expected a non-negative integer, got " + q(text));
                                  return false;
                                }
                                s.seed = seed;
                                return true;
                              }),
      }};
  return t;
}

void read_sim(Loader& l, const YAML::Node& n, const std::string& path, SimSettings& s) {
  if (n.IsNull()) return;
  Fields f;
  if (!sim_table().read(l, n, path, s, &f)) return;
  const YAML::Node* dflt = Loader::get(f, "default_output_tokens");
  const YAML::Node* mx = Loader::get(f, "max_output_tokens");
  if ((dflt || mx) && s.default_output_tokens > s.max_output_tokens) {
    l.error(join(path, "default_output_tokens"), l.line_of(dflt ? *dflt : *mx),
            "default_output_tokens (" + std::to_string(s.default_output_tokens) +
                ") is greater than max_output_tokens (" + std::to_string(s.max_output_tokens) + ")");
  }
}

const Enum<LoadSource>& load_source_enum() {
  static const Enum<LoadSource> e{"load source", {{"none", LoadSource::none}, {"vllm", LoadSource::vllm}, {"ollama", LoadSource::ollama}}};
  return e;
}

const Table<LoadSignals>& load_table() {
  static const Table<LoadSignals> t{
      "models[].backends[].load",
      {
          choice("source", &LoadSignals::source, load_source_enum(),
                 "Where the backend's load is read: `vllm` (its Prometheus endpoint: `vllm:num_requests_running`, "
                 "`vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`), `ollama` (`/api/ps`: the memory its "
                 "loaded models hold, against `vram_bytes`)."),
          text("path", &LoadSignals::path, "The path read on the backend's host and port.")
              .with_default("`/metrics` (vllm), `/api/ps` (ollama)"),
          duration("interval", &LoadSignals::interval, Millis{50}, "How often it is read."),
          number("max_kv", &LoadSignals::max_kv, 0.05, 1.0,
                 "From this share of its KV cache (or memory) in use, the backend takes no new request: another "
                 "backend of the route does, or, when every one is that full, requests wait in the concurrency "
                 "gate by priority."),
          integer("vram_bytes", &LoadSignals::vram_bytes, 0, kMaxI64, "`ollama`: the memory its models may hold."),
      }};
  return t;
}

const Table<AdaptiveLimit>& adaptive_table() {
  static const Table<AdaptiveLimit> t{
      "models[].backends[].adaptive",
      {
          duration("target_ttft", &AdaptiveLimit::target_ttft, Millis{1},
                   "The time to first token (whole answer when not streamed) the backend should keep: while the "
                   "p90 of a period is above it, the limit shrinks by a quarter.")
              .needed(),
          integer("min", &AdaptiveLimit::min, 1, 1'000'000, "The limit never goes below it."),
          duration("interval", &AdaptiveLimit::interval, Millis{250},
                   "The period over which the TTFT is measured and the limit reconsidered."),
      }};
  return t;
}

// The keys of one backend: an entry of `backends`, or (those marked short_form) the
// route's own map in the short form. The short form names the backend's in-flight limit
// backend_max_in_flight (max_in_flight is the route's).
const Table<Backend>& backend_table() {
  static const Table<Backend> t{
      "models[].backends[]",
      {
          custom<Backend>("provider", provider_enum().expected(true), "— (required)",
                          "`simulated`, `openai` (any OpenAI-compatible server), `ollama` or `anthropic` (the Messages "
                          "API; see `docs/translation.md`).")
              .short_form(),
          custom<Backend>("base_url", "URL", "— (required, except `simulated`)",
                          "Required for `openai`, `ollama` and `anthropic` (e.g. `https://api.anthropic.com`); an error for "
                          "`simulated` (it runs in-process). See below for its syntax.")
              .short_form(),
          custom<Backend>("model", "string", "the alias", "Real model name sent upstream.").short_form(),
          custom<Backend>("api_key", "secret", "none", "Provider credential, literally (see Provider credential).")
              .short_form(),
          custom<Backend>("api_key_env", "env var name", "none",
                          "Name of an environment variable holding the provider credential.")
              .short_form(),
          boolean("tls_verify", &Backend::tls_verify, "Verify the upstream's TLS certificate.")
              .short_form()
              .read_at(-1),
          custom<Backend>("ca_file", "path", "none",
                          "Extra CA bundle (PEM). Relative to the config file's directory; the file must exist. The stored "
                          "value is the resolved path.")
              .short_form(),
          custom<Backend>("sim", "map", "see `models[].sim`", "Only for provider `simulated` (an error for the others).")
              .short_form(),
          text("name", &Backend::name,
               "The backend's label in metrics, logs and `/infra`, and its identity (see Backend names). Letters, "
               "digits and `. _ - : @ /`, at most 128 characters.")
              .with_default("see below")
              .then([](Loader& l, const YAML::Node& n, const std::string& p, Backend& b) {
                return l.report(check_ident(b.name), p, n);
              }),
          integer("weight", &Backend::weight, 1, 1'000'000, "For `balance: weighted` (and the weighted picks of `least_connections` and `latency`)."),
          integer("max_in_flight", &Backend::max_in_flight, 0, 1'000'000,
                  "Requests in flight to this backend, shared by every route using it (0 = unlimited). In the "
                  "short form: `backend_max_in_flight`.")
              .read_at(-1),
          boolean("probe", &Backend::probe, "Whether the active health probe runs for it (when `routing.health.interval` is set)."),
          custom<Backend>("load", "map", "none",
                          "The backend's own load signals, see `models[].backends[].load` and `docs/routing.md` "
                          "(\"Load-aware admission\").",
                          [](Loader& l, const YAML::Node& v, const std::string& p, Backend& b) {
                            if (v.IsNull()) return true;
                            if (!load_table().read(l, v, p, b.load)) return false;
                            if (b.load.source == LoadSource::ollama && b.load.vram_bytes <= 0) {
                              l.error(join(p, "vram_bytes"), l.line_of(v), "source ollama needs vram_bytes (the memory its models may hold)");
                              return false;
                            }
                            if (b.load.path.empty()) b.load.path = b.load.source == LoadSource::ollama ? "/api/ps" : "/metrics";
                            return true;
                          })
              .short_form(),
          custom<Backend>("adaptive", "map", "none",
                          "An in-flight limit that follows the backend's time to first token, between `min` and its "
                          "`max_in_flight` (required), see `models[].backends[].adaptive` and `docs/routing.md` "
                          "(\"Adaptive concurrency\").",
                          [](Loader& l, const YAML::Node& v, const std::string& p, Backend& b) {
                            if (v.IsNull()) return true;
                            return adaptive_table().read(l, v, p, b.adaptive);
                          })
              .short_form(),
          boolean("native_responses", &Backend::native_responses,
                  "The backend serves OpenAI's Responses API itself (`POST <base_url>/responses`: OpenAI, vLLM): "
                  "`/v1/responses` requests are passed to it in their own form, with the features only it can "
                  "serve (built-in tools, reasoning items), instead of translated to chat completions. Only for "
                  "provider `openai`. See `docs/api.md`, \"Responses\".")
              .short_form(),
      }};
  return t;
}

// The backend keys that depend on the provider or the route: provider, base_url, model,
// ca_file, sim and the credential; the others are read by the table.
void read_backend(Loader& l, const YAML::Node& n, const std::string& path, const Fields& f, const std::string& alias,
                  bool short_form, Backend& b, bool& provider_ok) {
  auto p = [&](std::string_view k) { return join(path, k); };
  provider_ok = false;
  if (auto v = Loader::get(f, "provider")) {
    provider_ok = provider_enum().read(l, *v, p("provider"), b.provider);
  } else {
    l.error(path, l.line_of(n),
            std::string("missing required key 'provider' (simulated, openai, ollama or anthropic)") +
                (short_form ? ", or a 'backends' list" : ""));
  }

  if (auto v = Loader::get(f, "base_url")) {
    if (l.get_string(*v, p("base_url"), b.base_url)) {
      if (provider_ok && b.provider == Provider::simulated) {
        l.error(p("base_url"), l.line_of(*v), "not used by provider simulated (it runs in-process)");
      } else {
        l.report(check_url(b.base_url, b), p("base_url"), *v);
      }
    }
  } else if (provider_ok && b.provider != Provider::simulated) {
    l.error(path, l.line_of(n),
            std::string("missing required key 'base_url' for provider ") + std::string(to_string(b.provider)));
  }

  b.model = alias;
  if (auto v = Loader::get(f, "model")) {
    if (l.get_string(*v, p("model"), b.model)) {
      if (b.model.empty()) l.error(p("model"), l.line_of(*v), "must not be empty");
      else if (has_ctl(b.model)) l.error(p("model"), l.line_of(*v), "must not contain control characters");
    }
  }

  backend_table().read_fields(l, n, f, path, b, short_form, INT_MIN, -1);  // tls_verify, max_in_flight
  if (short_form) {
    if (auto v = Loader::get(f, "backend_max_in_flight")) {
      l.get_int(*v, p("backend_max_in_flight"), 0, 1'000'000, b.max_in_flight);
    }
  }
  if (auto v = Loader::get(f, "ca_file")) {
    std::string file;
    if (l.get_string(*v, p("ca_file"), file)) {
      if (file.empty()) {
        l.error(p("ca_file"), l.line_of(*v), "must not be empty");
      } else {
        fs::path cp(file);
        if (cp.is_relative()) cp = l.base_dir() / cp;
        if (!l.files().is_regular_file(cp.string())) l.error(p("ca_file"), l.line_of(*v), "file not found: " + cp.string());
        else b.ca_file = cp.string();
      }
    }
  }

  if (auto v = Loader::get(f, "sim")) {
    if (provider_ok && b.provider != Provider::simulated) {
      l.error(p("sim"), l.line_of(*v), "sim settings apply only to provider simulated");
    } else {
      read_sim(l, *v, p("sim"), b.sim);
    }
  }
  backend_table().read_fields(l, n, f, path, b, short_form, 0, INT_MAX);  // name, weight, probe, native_responses
  if (b.native_responses && provider_ok && b.provider != Provider::openai) {
    const YAML::Node* v = Loader::get(f, "native_responses");
    l.error(p("native_responses"), v ? l.line_of(*v) : l.line_of(n), "only provider openai serves the Responses API");
  }

  // Provider credential: (short form) SLUICE_MODEL_<ALIAS>_API_KEY, else api_key /
  // api_key_env, else OPENAI_API_KEY / ANTHROPIC_API_KEY for those providers.
  const YAML::Node* lit = Loader::get(f, "api_key");
  const YAML::Node* var = Loader::get(f, "api_key_env");
  if (lit && var) {
    l.error(path, l.line_of(n), "set only one of 'api_key' and 'api_key_env'");
    return;
  }
  if (short_form && !alias.empty()) {
    const std::string ovr = env_model_var(alias);
    if (auto val = l.getenv(ovr)) {
      if (auto e = check_secret(*val); !e.empty()) l.error("env " + ovr, 0, e);
      else b.api_key = *val;
      return;
    }
  }
  if (lit) {
    std::string s;
    if (l.get_string(*lit, p("api_key"), s) && l.report(check_secret(s), p("api_key"), *lit)) b.api_key = std::move(s);
  } else if (var) {
    std::string name;
    if (l.get_string(*var, p("api_key_env"), name) && l.report(check_env_name(name), p("api_key_env"), *var)) {
      auto val = l.getenv(name);
      if (!val) l.error(p("api_key_env"), l.line_of(*var), "environment variable " + env_name_for_error(name) + " is not set");
      else if (auto e = check_secret(*val); !e.empty())
        l.error(p("api_key_env"), l.line_of(*var), "environment variable " + env_name_for_error(name) + ": " + e);
      else b.api_key = *val;
    }
  } else if (provider_ok && (b.provider == Provider::openai || b.provider == Provider::anthropic)) {
    const char* var_name = b.provider == Provider::openai ? "OPENAI_API_KEY" : "ANTHROPIC_API_KEY";
    if (auto val = l.getenv(var_name)) {
      if (auto e = check_secret(*val); !e.empty()) l.error(std::string("env ") + var_name, 0, e);
      else b.api_key = *val;
    }
  }
}

const Table<Price>& price_table() {
  static const Table<Price> t{
      "models[].price",
      {
          number("input", &Price::input, 0, 1e6, "USD per million prompt tokens."),
          number("output", &Price::output, 0, 1e6, "USD per million completion tokens."),
      }};
  return t;
}

const Table<EmbeddingBatch>& embedding_batch_table() {
  static const Table<EmbeddingBatch> t{
      "models[].embedding_batch",
      {
          duration("window", &EmbeddingBatch::window, Millis{1},
                   "How long the first embeddings request of a batch waits for others to the same backend."),
          integer("max_inputs", &EmbeddingBatch::max_inputs, 1, 2048,
                  "Inputs in one call at most; a batch that reaches it is sent at once."),
      }};
  return t;
}

const Table<Overload>& overload_table() {
  static const Table<Overload> t{
      "models[].overload",
      {
          text("model", &Overload::model,
               "The light model (an alias, not the route itself) that serves a request this route's queue cannot: "
               "it must have a free slot at once, else the canned reply (with `canned`) or the refusal.")
              .with_default("none"),
          boolean("canned", &Overload::canned,
                  "Answer with the route's `canned_reply` (which must be set) when there is no light model or it is "
                  "busy too."),
          duration("max_wait", &Overload::max_wait, Millis{0},
                   "With `canned`: degrade a request that waited this long in the queue (0: when its class's "
                   "`max_wait` ends the wait). Without `canned` it is not used: a request whose light model is busy "
                   "too keeps waiting its class's time."),
      }};
  return t;
}

const Enum<LoadPolicy>& load_policy_enum() {
  static const Enum<LoadPolicy> e{
      "load_options policy", {{"pin", LoadPolicy::pin}, {"allow", LoadPolicy::allow}, {"steer", LoadPolicy::steer}}};
  return e;
}

// A map keyed by the load options (num_ctx, num_gpu, num_batch), each value read by `one`.
template <class V, class One>
bool read_load_map(Loader& l, const YAML::Node& n, const std::string& p, std::map<std::string, V, std::less<>>& out,
                   One one) {
  if (!n.IsMap()) {
    l.fail(p, n, std::string("expected a map of num_ctx, num_gpu, num_batch, got ") + kind_of(n));
    return false;
  }
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = it->first.Scalar();
    const std::string kp = join(p, k);
    if (std::find(std::begin(kLoadOptionKeys), std::end(kLoadOptionKeys), k) == std::end(kLoadOptionKeys)) {
      l.fail(kp, it->first, "not a load option: expected num_ctx, num_gpu or num_batch");
      continue;
    }
    V v{};
    if (one(it->second, kp, k, v)) out[k] = std::move(v);
  }
  return true;
}

// One load option's value: num_gpu from -1 (every layer), the others from 1.
bool read_load_value(Loader& l, const YAML::Node& n, const std::string& p, const std::string& key, std::int64_t& v) {
  long long x = 0;
  if (!l.get_int(n, p, key == "num_gpu" ? -1 : 1, 1'000'000, x)) return false;
  v = x;
  return true;
}

const Table<LoadOptionsPolicy>& load_options_table() {
  static const Table<LoadOptionsPolicy> t{
      "models[].load_options",
      {
          choice("policy", &LoadOptionsPolicy::policy, load_policy_enum(),
                 "Required. `pin`: a client's `num_ctx`, `num_gpu`, `num_batch` are replaced by `values` (removed when "
                 "`values` has none); `allow`: a client's value must be in `values` or `allowed` (else 400 "
                 "`option_not_allowed`); `steer`: any value passes, and the request goes to a backend whose model "
                 "is loaded with the same ones (least connections among them), else to the least loaded. Under any "
                 "policy a client's `keep_alive` is dropped (0 would unload the model for everyone).")
              .needed(),
          custom<LoadOptionsPolicy>(
              "values", "map", "none",
              "The route's own values (`{num_ctx: 4096, num_gpu: -1}`), set on every request that gives none.",
              [](Loader& l, const YAML::Node& n, const std::string& p, LoadOptionsPolicy& o) {
                return read_load_map(l, n, p, o.values, [&](const YAML::Node& v, const std::string& vp,
                                                           const std::string& k, std::int64_t& out) {
                  return read_load_value(l, v, vp, k, out);
                });
              }),
          custom<LoadOptionsPolicy>(
              "allowed", "map of lists", "none",
              "With `allow`: further values a client may ask for (`{num_ctx: [2048, 8192]}`).",
              [](Loader& l, const YAML::Node& n, const std::string& p, LoadOptionsPolicy& o) {
                return read_load_map(l, n, p, o.allowed, [&](const YAML::Node& v, const std::string& vp,
                                                            const std::string& k, std::vector<std::int64_t>& out) {
                  if (!v.IsSequence()) {
                    l.fail(vp, v, std::string("expected a list of values, got ") + kind_of(v));
                    return false;
                  }
                  for (std::size_t i = 0; i < v.size(); ++i) {
                    std::int64_t x = 0;
                    if (read_load_value(l, v[i], index(vp, i), k, x)) out.push_back(x);
                  }
                  return true;
                });
              }),
      }};
  return t;
}

const Table<Route>& route_table() {
  static const Table<Route> t = Table<Route>{
      "models[]",
      {
          custom<Route>("alias", "string", "— (required)",
                        "What clients put in `\"model\"`. Unique; not empty; no spaces or control characters; `*` is "
                        "reserved.",
                        [](Loader& l, const YAML::Node& v, const std::string& p, Route& r) {
                          l.route_origins_.back().at = {p, l.line_of(v)};
                          if (!l.get_string(v, p, r.alias)) return false;
                          if (r.alias.empty()) l.fail(p, v, "must not be empty");
                          else if (r.alias == "*") l.fail(p, v, "'*' is reserved (it means all models in a key's list)");
                          else if (has_space_or_ctl(r.alias)) l.fail(p, v, "must not contain spaces or control characters");
                          return true;
                        })
              .needed()
              .read_at(-2),
          integer("max_in_flight", &Route::max_in_flight, 0, 1'000'000,
                  "Requests in flight for this alias (0 = unlimited); beyond it requests queue.")
              .read_at(-1),  // then the backends (read_route), then the rest
          custom<Route>("backend_max_in_flight", "integer", "0",
                        "Short form only: the backend's `max_in_flight` (0–1000000)."),
          custom<Route>("backends", "list of maps", "—",
                        "The long form: 1 to 64 entries, see `models[].backends[]`."),
          choice("balance", &Route::balance, balance_enum(),
                 "How a request picks one of the route's backends (`docs/routing.md`)."),
          boolean("drop_params", &Route::drop_params,
                  "Request fields that the route's Ollama or Anthropic backends cannot honour (`n` > 1, `logprobs`, "
                  "`reasoning_effort`... see `docs/api.md`) are left out of the call instead of refused (400 "
                  "`option_not_allowed`)."),
          integer("retries", &Route::retries, 0, 10,
                  "Further attempts after the first, on other backends of the route and then on the fallbacks' "
                  "backends; only before the first byte reached the client.")
              .read_at(1),
          custom<Route>("fallbacks", "list of aliases", "none",
                        "Routes whose backends are tried next, in order (at most 16). Each must be a configured alias, "
                        "not the route itself, and listed once.",
                        [](Loader& l, const YAML::Node& v, const std::string& p, Route& r) {
                          if (v.IsSequence() && v.size() > Route::kMaxFallbacks) {
                            l.fail(p, v, "at most " + std::to_string(Route::kMaxFallbacks) + " fallbacks, got " +
                                             std::to_string(v.size()));
                            return false;
                          }
                          return read_list(l, v, p, "model aliases",
                                           [&](const YAML::Node& a, const std::string& ap, std::string alias) {
                                             if (alias.empty()) {
                                               l.fail(ap, a, "must not be empty");
                                               return;
                                             }
                                             r.fallbacks.push_back(std::move(alias));
                                             l.route_origins_.back().fallbacks.push_back({ap, l.line_of(a)});
                                           });
                        })
              .read_at(3),
          custom<Route>("canned_reply", "string", "none",
                        "Answered (status 200) when every option failed; without it the answer is a 503. Must not be "
                        "empty.",
                        [](Loader& l, const YAML::Node& v, const std::string& p, Route& r) {
                          std::string text;
                          if (!l.get_string(v, p, text)) return false;
                          if (text.empty()) l.fail(p, v, "must not be empty (omit it to answer 503)");
                          else r.canned_reply = std::move(text);
                          return true;
                        })
              .read_at(4),
          custom<Route>("canary", "map", "none", "Sends a share of the traffic to another route, see `models[].canary`.",
                        [](Loader& l, const YAML::Node& v, const std::string& p, Route& r) {
                          CanaryConfig cc;
                          read_canary(l, v, p, cc);
                          r.canary = std::move(cc);
                          return true;
                        })
              .read_at(5),
          custom<Route>("breaker", "map", "`routing.breaker`",
                        "Circuit breaker for this route's backends; the keys of `routing.breaker`; keys not given take "
                        "`routing.breaker`'s values.",
                        [](Loader& l, const YAML::Node& v, const std::string& p, Route& r) {
                          if (v.IsNull()) return true;
                          BreakerConfig b = l.config_->routing.breaker;  // keys not given: the global breaker's
                          read_breaker(l, v, p, b);
                          r.breaker = b;
                          l.route_origins_.back().breaker = {p, l.line_of(v)};
                          return true;
                        })
              .read_at(6),
          text("guardrails", &Route::guardrails,
               "The `guardrails[]` policy that screens this route's requests (a key's own policy wins).")
              .with_default("none"),
          custom<Route>("cache", "map", "none",
                        "The response cache for this route, see `models[].cache` and `docs/cache.md`; `cache: {}` "
                        "turns it on with the defaults.",
                        [](Loader& l, const YAML::Node& v, const std::string& p, Route& r) {
                          RouteCache rc;
                          read_route_cache(l, v, p, rc);
                          r.cache = rc;
                          return true;
                        }),
          optional_section("price", &Route::price, price_table(),
                           "What this model's tokens cost, see `models[].price`: the spend and savings estimates "
                           "(`sluice_spent_usd_total`, `sluice_saved_usd_total`, the records' `cost_usd` and "
                           "`saved_usd`)."),
          optional_section("embedding_batch", &Route::embedding_batch, embedding_batch_table(),
                           "Micro-batching of embeddings requests, see `models[].embedding_batch`: requests to one "
                           "backend arriving within `window` go upstream as one call (same `encoding_format`, "
                           "`dimensions` and kind of input), and each gets its own vectors back."),
          optional_section("load_options", &Route::load_options, load_options_table(),
                           "What the route does with the options that make Ollama load the model again (`num_ctx`, "
                           "`num_gpu`, `num_batch`), see `models[].load_options` and `docs/tuning.md`."),
          optional_section("overload", &Route::overload, overload_table(),
                           "Overload degrades instead of refusing, see `models[].overload`: when the queue is full "
                           "or a request waited too long, it goes to a light model or gets the canned reply."),
          custom<Route>("allow_params", "list", "none",
                        "Request fields that bill or store on the operator's upstream account, which clients may set "
                        "on this model: `service_tier`, `store`, `web_search_options`; and, for backends that serve "
                        "the Responses API natively, `builtin_tools` (web search, file search, code interpreter...), "
                        "`file_ids` (inputs by file id) and `prompt` (stored prompts). Without it a request setting "
                        "one is refused (400 `option_not_allowed`).",
                        [](Loader& l, const YAML::Node& v, const std::string& p, Route& r) {
                          return read_list(l, v, p, "request fields",
                                           [&](const YAML::Node& a, const std::string& ap, std::string name) {
                                             static constexpr std::string_view kKnown[] = {
                                                 "service_tier", "store",    "web_search_options",
                                                 "builtin_tools", "file_ids", "prompt"};
                                             if (std::find(std::begin(kKnown), std::end(kKnown), name) == std::end(kKnown)) {
                                               l.fail(ap, a, "unknown field " + q(name) +
                                                                 " (expected service_tier, store, web_search_options, "
                                                                 "builtin_tools, file_ids or prompt)");
                                               return;
                                             }
                                             r.allow_params.push_back(std::move(name));
                                           });
                        })
              .read_at(2),
      }}.accepting("alias", [] {
        // The short form: a backend's keys at the route's top level.
        std::vector<std::string_view> k;
        for (const auto& key : backend_table().keys) {
          if (key.in_short_form) k.push_back(key.name);
        }
        return k;
      }());
  return t;
}

void read_route(Loader& l, const YAML::Node& n, const std::string& path, Route& r) {
  RouteOrigin& o = l.route_origins_.back();
  o.at = {path, l.line_of(n)};
  Fields f;
  const auto& table = route_table();
  if (!l.fields(n, path, table.names, f)) return;
  table.read_fields(l, n, f, path, r, false, INT_MIN, -1);  // alias, max_in_flight
  auto p = [&](std::string_view k) { return join(path, k); };

  if (const YAML::Node* list = Loader::get(f, "backends")) {
    // Long form. The backend keys belong in the entries then.
    for (const auto& key : backend_table().keys) {
      if (!key.in_short_form) continue;
      if (auto v = Loader::get(f, key.name)) {
        l.error(p(key.name), l.line_of(*v), "not allowed together with 'backends': set it in each backend entry instead");
      }
    }
    if (auto v = Loader::get(f, "backend_max_in_flight")) {
      l.error(p("backend_max_in_flight"), l.line_of(*v),
              "not allowed together with 'backends': set max_in_flight in each backend entry instead");
    }
    const std::string lp = p("backends");
    if (!list->IsSequence()) {
      l.error(lp, l.line_of(*list), std::string("expected a list of backends, got ") + kind_of(*list));
    } else if (list->size() == 0) {
      l.error(lp, l.line_of(*list), "must list at least one backend");
    } else if (list->size() > Route::kMaxBackends) {
      l.error(lp, l.line_of(*list), "at most " + std::to_string(Route::kMaxBackends) + " backends per route, got " +
                                        std::to_string(list->size()));
    } else {
      for (size_t i = 0; i < list->size(); ++i) {
        const YAML::Node bn = (*list)[i];
        const std::string bp = index(lp, i);
        Backend b;
        bool ok = false;
        Fields bf;
        if (l.fields(bn, bp, backend_table().names, bf)) read_backend(l, bn, bp, bf, r.alias, false, b, ok);
        r.backends.push_back(std::move(b));
        l.route_origins_.back().backends.push_back({bp, l.line_of(bn), false, ok});
      }
    }
  } else {
    Backend b;
    bool ok = false;
    read_backend(l, n, path, f, r.alias, true, b, ok);
    r.backends.push_back(std::move(b));
    RouteOrigin& ro = l.route_origins_.back();
    ro.backends.push_back({ro.at.path, ro.at.line, true, ok});
  }
  table.read_fields(l, n, f, path, r, false, 0, INT_MAX);
}

std::string endpoint_of(const Backend& b) { return host_for_display(b.host) + ":" + std::to_string(b.port); }

// Default names: host:port for an external backend; when several different backends
// (provider, scheme, path, model, credential, TLS settings or native_responses) share the host:port,
// host:port/model if the model tells them apart, else provider:host:port/model if that
// does, else host:port#k (k-th seen there, from 1). simulated:<alias>
// (simulated:<alias>#<i> in a route with several backends) for a simulated one.
void name_backends(Config& c) {
  auto identity = [](const Backend& b) {
    return std::string(to_string(b.provider)) + (b.tls ? " tls " : " tcp ") + b.path_prefix + " " + b.model +
           (b.tls_verify ? " verify " : " noverify ") + (b.native_responses ? "native " : "") + b.ca_file + " " +
           b.api_key;
  };
  struct Seen {
    std::vector<std::string> identities;  // distinct, in config order
    std::set<std::string> models, provider_models;
  };
  std::unordered_map<std::string, Seen> at;  // host:port -> what is configured there
  for (const auto& r : c.routes) {
    for (const auto& b : r.backends) {
      if (b.provider == Provider::simulated || b.host.empty()) continue;
      auto& s = at[endpoint_of(b)];
      const auto id = identity(b);
      if (std::find(s.identities.begin(), s.identities.end(), id) != s.identities.end()) continue;
      s.identities.push_back(id);
      s.models.insert(b.model);
      s.provider_models.insert(std::string(to_string(b.provider)) + " " + b.model);
    }
  }
  for (auto& r : c.routes) {
    for (size_t i = 0; i < r.backends.size(); ++i) {
      Backend& b = r.backends[i];
      if (!b.name.empty()) continue;
      if (b.provider == Provider::simulated) {
        b.name = "simulated:" + r.alias + (r.backends.size() > 1 ? "#" + std::to_string(i) : std::string());
      } else if (!b.host.empty()) {
        const std::string ep = endpoint_of(b);
        const Seen& s = at[ep];
        const auto n = s.identities.size();
        if (n <= 1) b.name = ep;
        else if (s.models.size() == n) b.name = ep + "/" + b.model;
        else if (s.provider_models.size() == n) b.name = std::string(to_string(b.provider)) + ":" + ep + "/" + b.model;
        else {
          const auto k = std::find(s.identities.begin(), s.identities.end(), identity(b)) - s.identities.begin();
          b.name = ep + "#" + std::to_string(k + 1);
        }
      }
    }
  }
}

// Backends with the same name are one backend: they must agree on what they are, and a
// simulated one (in-process, per route) is never shared.
void check_backends(Loader& l, Config& c) {
  struct Use {
    size_t route, idx;
  };
  std::map<std::string, std::vector<Use>, std::less<>> by_name;
  for (size_t i = 0; i < c.routes.size() && i < l.route_origins_.size(); ++i) {
    const Route& r = c.routes[i];
    for (size_t j = 0; j < r.backends.size() && j < l.route_origins_[i].backends.size(); ++j) {
      if (r.backends[j].name.empty() || !l.route_origins_[i].backends[j].valid) continue;
      by_name[r.backends[j].name].push_back({i, j});
    }
  }
  auto where = [&](const Use& u) {
    const BackendOrigin& o = l.route_origins_[u.route].backends[u.idx];
    return o.path + (o.line ? ", line " + std::to_string(o.line) : std::string()) + ", route " +
           q(c.routes[u.route].alias);
  };
  for (auto& [name, uses] : by_name) {
    const Use* limit_from = nullptr;  // the first use that sets max_in_flight
    for (size_t k = 0; k < uses.size(); ++k) {
      const Use& u = uses[k];
      const Backend& b = c.routes[u.route].backends[u.idx];
      const BackendOrigin& o = l.route_origins_[u.route].backends[u.idx];
      const Use& first = uses[0];
      const Backend& fb = c.routes[first.route].backends[first.idx];
      if (k > 0) {
        const auto same_route = std::find_if(uses.begin(), uses.begin() + static_cast<std::ptrdiff_t>(k),
                                             [&](const Use& e) { return e.route == u.route; });
        if (same_route != uses.begin() + static_cast<std::ptrdiff_t>(k)) {
          l.error(o.path, o.line,
                "backend name " + q(name) + " appears twice in this route (also at " + where(*same_route) +
                    "); a backend may be listed only once per route (set 'name' to tell two apart)");
          continue;
        }
        if (b.provider == Provider::simulated || fb.provider == Provider::simulated) {
          l.error(o.path, o.line,
                "backend name " + q(name) + " is already used at " + where(first) +
                    "; a simulated backend's name must be unique (set 'name' to tell them apart)");
          continue;
        }
        std::vector<std::string> diffs;
        if (b.provider != fb.provider) {
          diffs.push_back("provider (" + std::string(to_string(b.provider)) + " vs " +
                          std::string(to_string(fb.provider)) + ")");
        }
        if (b.tls != fb.tls || b.host != fb.host || b.port != fb.port || b.path_prefix != fb.path_prefix) {
          diffs.push_back("base_url (" + q(b.base_url) + " vs " + q(fb.base_url) + ")");
        }
        if (b.model != fb.model) diffs.push_back("model (" + q(b.model) + " vs " + q(fb.model) + ")");
        if (b.probe != fb.probe) {
          diffs.push_back(std::string("probe (") + (b.probe ? "true" : "false") + " vs " +
                          (fb.probe ? "true" : "false") + ")");
        }
        if (b.tls_verify != fb.tls_verify) diffs.push_back("tls_verify");
        if (b.native_responses != fb.native_responses) diffs.push_back("native_responses");
        if (b.ca_file != fb.ca_file) diffs.push_back("ca_file");
        if (b.api_key != fb.api_key) diffs.push_back("credential");  // never print it
        if (!diffs.empty()) {
          std::string list;
          for (size_t d = 0; d < diffs.size(); ++d) list += (d ? ", " : "") + diffs[d];
          l.error(o.path, o.line,
                "backend " + q(name) + " differs from the one at " + where(first) + " in " + list +
                    "; backends with the same name are one backend and must agree on provider, base_url, "
                    "model, credentials, TLS settings, native_responses, max_in_flight and probe (set 'name' to tell them "
                    "apart)");
        }
      }
      // The in-flight limit is shared by every route using the backend: those that set
      // it must agree; the others take it.
      if (b.max_in_flight == 0) continue;
      if (!limit_from) {
        limit_from = &u;
        continue;
      }
      const Backend& lb = c.routes[limit_from->route].backends[limit_from->idx];
      if (lb.max_in_flight != b.max_in_flight) {
        l.error(o.path, o.line,
              std::string(o.short_form ? "backend_max_in_flight " : "max_in_flight ") + std::to_string(b.max_in_flight) +
                  " differs from " + std::to_string(lb.max_in_flight) + " set by route " +
                  q(c.routes[limit_from->route].alias) + " for the same backend " + name);
      }
    }
    if (limit_from) {
      const int limit = c.routes[limit_from->route].backends[limit_from->idx].max_in_flight;
      for (const Use& u : uses) {
        Backend& b = c.routes[u.route].backends[u.idx];
        if (b.max_in_flight == 0) b.max_in_flight = limit;
      }
    }
  }

  // A backend has one breaker: routes sharing a backend that override the breaker must
  // override it the same way.
  auto same = [](const BreakerConfig& a, const BreakerConfig& b) {
    return a.enabled == b.enabled && a.window == b.window && a.min_requests == b.min_requests &&
           a.error_rate == b.error_rate && a.p95_ttft == b.p95_ttft && a.open_for == b.open_for &&
           a.half_open_probes == b.half_open_probes;
  };
  std::unordered_map<std::string, size_t> owner;  // backend name -> first route overriding its breaker
  for (size_t i = 0; i < c.routes.size() && i < l.route_origins_.size(); ++i) {
    const Route& r = c.routes[i];
    if (!r.breaker) continue;
    for (const auto& b : r.backends) {
      if (b.name.empty()) continue;
      auto [it, fresh] = owner.emplace(b.name, i);
      if (fresh || it->second == i || same(*c.routes[it->second].breaker, *r.breaker)) continue;
      const Origin& other = l.route_origins_[it->second].breaker;
      l.error(l.route_origins_[i].breaker.path, l.route_origins_[i].breaker.line,
            "breaker differs from the one route " + q(c.routes[it->second].alias) + " sets (" + other.path +
                (other.line ? ", line " + std::to_string(other.line) : std::string()) + ") for the shared backend " +
                q(b.name) + "; a backend has one breaker");
      break;
    }
  }
}

void check_route_links(Loader& l, const Config& c, const std::unordered_map<std::string_view, size_t>& aliases) {
  for (size_t i = 0; i < c.routes.size() && i < l.route_origins_.size(); ++i) {
    const Route& r = c.routes[i];
    const RouteOrigin& o = l.route_origins_[i];
    std::set<std::string_view> seen;
    for (size_t k = 0; k < r.fallbacks.size() && k < o.fallbacks.size(); ++k) {
      const std::string& fb = r.fallbacks[k];
      const Origin& at = o.fallbacks[k];
      if (fb == r.alias) l.error(at.path, at.line, "a route cannot be its own fallback");
      else if (!aliases.count(fb)) l.error(at.path, at.line, "unknown model alias " + q(fb));
      else if (!seen.insert(fb).second) l.error(at.path, at.line, "duplicate fallback " + q(fb));
    }
    for (std::size_t j = 0; j < r.backends.size(); ++j) {
      const Backend& b = r.backends[j];
      if (b.adaptive.target_ttft.count() == 0) continue;
      const std::string p = r.backends.size() == 1 ? join(index("models", i), "adaptive")
                                                   : join(index(join(index("models", i), "backends"), j), "adaptive");
      if (b.max_in_flight <= 0) l.error(p, 0, "needs the backend's max_in_flight (the limit's ceiling)");
      else if (b.adaptive.min > b.max_in_flight) l.error(join(p, "min"), 0, "is above the backend's max_in_flight");
    }
    if (r.load_options) {
      const std::string p = join(index("models", i), "load_options");
      const LoadOptionsPolicy& lo = *r.load_options;
      if (!lo.allowed.empty() && lo.policy != LoadPolicy::allow) l.error(join(p, "allowed"), 0, "is read only with policy: allow");
      if (std::none_of(r.backends.begin(), r.backends.end(), [](const Backend& b) { return b.provider == Provider::ollama; })) {
        l.error(p, 0, "applies to Ollama backends (provider: ollama), and this route has none");
      }
      // The route's values are requests' values: the options' ranges hold for them too.
      auto in_range = [&](const std::string& where, std::string_view key, std::int64_t v) {
        const auto range = c.options.find(std::string(key));
        if (range == c.options.end()) return;
        const double x = static_cast<double>(v);
        if (x < range->second.min || x > range->second.max) {
          l.error(where, 0, "outside options." + std::string(key) + "'s range (" + fmt_num(range->second.min) + " to " +
                                fmt_num(range->second.max) + ")");
        }
      };
      for (const auto& [k, v] : lo.values) in_range(join(join(p, "values"), k), k, v);
      for (const auto& [k, vs] : lo.allowed) {
        for (std::size_t j = 0; j < vs.size(); ++j) in_range(index(join(join(p, "allowed"), k), j), k, vs[j]);
      }
    }
    if (r.overload) {
      const std::string p = join(index("models", i), "overload");
      const Overload& ov = *r.overload;
      if (ov.model.empty() && !ov.canned) l.error(p, 0, "says neither a light model nor canned: true");
      if (ov.model == r.alias) l.error(join(p, "model"), 0, "a route cannot be its own light model");
      else if (!ov.model.empty() && !aliases.count(ov.model)) l.error(join(p, "model"), 0, "unknown model alias " + q(ov.model));
      if (ov.canned && !r.canned_reply) l.error(join(p, "canned"), 0, "needs the route's canned_reply");
    }
    if (r.canary && !r.canary->alias.empty()) {
      const std::string& ca = r.canary->alias;
      if (ca == r.alias) l.error(o.canary.path, o.canary.line, "a route cannot be its own canary");
      else if (!aliases.count(ca)) l.error(o.canary.path, o.canary.line, "unknown model alias " + q(ca));
    }
  }
}


}  // namespace

void read_models(Loader& l, const YAML::Node& v, Config& c) {
  l.models_line_ = l.line_of(v);
  if (v.IsNull()) return;
  if (!v.IsSequence()) {
    l.error("models", l.line_of(v), std::string("expected a list of routes, got ") + kind_of(v));
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    Route r;
    l.route_origins_.emplace_back();
    read_route(l, v[i], index("models", i), r);
    c.routes.push_back(std::move(r));
  }
}

void check_models(Loader& l, Config& c, std::unordered_map<std::string_view, size_t>& aliases) {
  if (c.routes.empty()) l.error("models", l.models_line_, "at least one route is required");
  for (size_t i = 0; i < c.routes.size(); ++i) {
    const auto& a = c.routes[i].alias;
    if (a.empty()) continue;
    auto [it, fresh] = aliases.emplace(a, i);
    if (!fresh) {
      const auto& first = l.route_origins_[it->second].at;
      l.error(l.route_origins_[i].at.path, l.route_origins_[i].at.line,
              "duplicate alias " + q(a) + " (first defined at " + first.path +
                  (first.line ? ", line " + std::to_string(first.line) : std::string()) + ")");
    }
  }
}

void check_backend_names(Loader& l, Config& c, const std::unordered_map<std::string_view, size_t>& aliases) {
  name_backends(c);
  check_backends(l, c);
  check_route_links(l, c, aliases);
}

std::string describe_models(const Config& c) {
  std::string out;
  out += "routes (" + std::to_string(c.routes.size()) + "):\n";
  for (const auto& r : c.routes) {
    // The route, then one line per backend.
    std::vector<std::string> parts;
    if (r.backends.size() > 1) {
      parts.push_back(std::to_string(r.backends.size()) + " backends, balance " + std::string(to_string(r.balance)));
    }
    parts.push_back("retries " + std::to_string(r.retries));
    if (r.max_in_flight) parts.push_back("max_in_flight " + std::to_string(r.max_in_flight));
    if (!r.fallbacks.empty()) {
      std::string fb = "fallbacks ";
      for (size_t i = 0; i < r.fallbacks.size(); ++i) fb += (i ? "," : "") + r.fallbacks[i];
      parts.push_back(fb);
    }
    if (r.canary) {
      parts.push_back("canary " + r.canary->alias + " " + fmt_num(r.canary->weight) + "%" +
                      (r.canary->sticky == CanarySticky::none ? "" : " sticky by " + std::string(to_string(r.canary->sticky))));
    }
    if (r.breaker) parts.push_back("own breaker");
    if (r.canned_reply) parts.push_back("canned reply");
    out += "  " + r.alias + ":";
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : " ") + parts[i];
    out += "\n";
    for (const Backend& b : r.backends) {
      out += "    -> " + std::string(to_string(b.provider));
      if (b.provider == Provider::simulated) {
        out += " (ttft " + fmt_duration(b.sim.ttft) + ", inter_token " + fmt_duration(b.sim.inter_token) +
               ", max_in_flight " + std::to_string(b.sim.max_in_flight) + ")";
      } else {
        out += " " + std::string(b.tls ? "https://" : "http://") + host_for_display(b.host) + ":" +
               std::to_string(b.port) + b.path_prefix;
        if (b.tls && !b.tls_verify) out += " (tls_verify off)";
      }
      out += " model " + b.model;
      if (!b.api_key.empty()) out += " api_key " + sluice::mask_key(b.api_key);
      out += " name " + b.name;
      if (b.weight != 1) out += " weight " + std::to_string(b.weight);
      if (b.max_in_flight) out += " max_in_flight " + std::to_string(b.max_in_flight);
      if (!b.probe) out += " probe off";
      out += "\n";
    }
  }
  return out;
}

void models_reference(std::vector<TableDoc>& out) {
  out.push_back(route_table().doc());
  out.push_back(price_table().doc());
  out.push_back(embedding_batch_table().doc());
  out.push_back(load_options_table().doc());
  out.push_back(overload_table().doc());
  out.push_back(load_table().doc());
  out.push_back(adaptive_table().doc());
  out.push_back(backend_table().doc());
  out.push_back(sim_table().doc());
}

void models_env_reference(std::vector<EnvDoc>& out) {
  out.push_back({"SLUICE_MODEL_<ALIAS>_API_KEY",
                 "the provider credential of short-form route `<ALIAS>` (see [Provider credential](#provider-credential))"});
  out.push_back({"OPENAI_API_KEY", "the provider credential of `openai` backends that set none"});
  out.push_back({"ANTHROPIC_API_KEY", "the provider credential of `anthropic` backends that set none"});
}

}  // namespace sluice::config::detail

namespace sluice::config {

std::string_view to_string(Provider p) noexcept {
  switch (p) {
    case Provider::simulated: return "simulated";
    case Provider::openai: return "openai";
    case Provider::ollama: return "ollama";
    case Provider::anthropic: return "anthropic";
  }
  return "unknown";
}

std::string_view to_string(LoadSource s) noexcept {
  switch (s) {
    case LoadSource::none: return "none";
    case LoadSource::vllm: return "vllm";
    case LoadSource::ollama: return "ollama";
  }
  return "none";
}

}  // namespace sluice::config
