// The simulator's HTTP face: routes, the generation and embeddings coroutines, fault
// handling, SimServer.
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <stdexcept>

#include "common/ids.hpp"
#include "sim/embeddings.hpp"
#include "sim/engine.hpp"
#include "sim/sim.hpp"
#include "sim/wire.hpp"

namespace sluice::sim {

namespace asio = boost::asio;
using namespace boost::asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;
using std::chrono::nanoseconds;

namespace {

struct Shared {
  std::shared_ptr<Engine> engine;
  std::vector<std::string> models;
  std::int64_t started_unix = 0;
};

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<nanoseconds>(b - a).count();
}

// A deadline already past (zero delays) costs no timer and no trip through the scheduler.
asio::awaitable<void> sleep_until(Clock::time_point tp) {
  if (tp <= Clock::now()) co_return;
  asio::steady_timer t(co_await asio::this_coro::executor);
  t.expires_at(tp);
  co_await t.async_wait(asio::use_awaitable);
}

const http::HeaderList kNoHeaders;

// Replies with an error in the API's shape. (Responses are built in named locals: GCC 12
// mishandled a temporary built by a conditional expression inside `co_await ex.reply(...)`.)
asio::awaitable<void> reply_error(http::Exchange& ex, Api api, ErrorKind kind, std::string message) {
  http::Response r = error_response(api, kind, message);
  co_await ex.reply(std::move(r));
}

// Set by serve() once it has counted the request's outcome; when the client-gone side
// of the race wins before that, the request counts as cancelled.
struct RunState {
  bool finished = false;
  bool abort = false;  // the abort fault fired: drop the connection
};

// What every request goes through after fault selection: the hang fault (until the client
// goes), then a decoding slot (a full queue is answered). nullopt: the request is over.
asio::awaitable<std::optional<Engine::Slot>> enter(Engine& eng, http::Exchange& ex, Api api, const Fault& fault,
                                                   RunState& st, std::int64_t kv = 0) {
  if (fault.kind == FaultKind::hang) {
    eng.count(Engine::Counter::hung);
    co_await sleep_until(Clock::time_point::max());  // until the client goes (or shutdown)
    co_return std::nullopt;
  }
  std::optional<Engine::Slot> slot = co_await eng.acquire(kv);
  if (!slot) {
    eng.count(Engine::Counter::rejected_queue_full);
    st.finished = true;
    co_await reply_error(ex, api, ErrorKind::queue_full, "queue full");
  }
  co_return slot;
}

// When the first token is due (an embeddings answer too): the fixed part + prefill per
// prompt token (+ the slow first token fault), each jittered, after the slot was taken.
Clock::time_point first_token_at(Engine& eng, const config::SimSettings& s, const Fault& fault,
                                 std::int64_t prompt_tokens, Clock::time_point slot_time, double factor = 1.0) {
  const auto prefill = std::chrono::duration_cast<nanoseconds>(
      (std::chrono::duration_cast<nanoseconds>(s.ttft) +
       nanoseconds(static_cast<std::int64_t>(s.ttft_per_prompt_token_ms * 1e6 * static_cast<double>(prompt_tokens)))) *
      factor);
  Clock::time_point at = slot_time + eng.jittered(prefill, s.jitter);
  if (fault.slow_first_token.count() > 0)
    at += eng.jittered(std::chrono::duration_cast<nanoseconds>(fault.slow_first_token), s.jitter);
  return at;
}

// Everything after fault selection: hang, slot, TTFT, tokens, the answer.
asio::awaitable<void> serve(std::shared_ptr<Engine> eng, http::Exchange& ex, GenRequest req,
                            config::SimSettings s, Fault fault, Clock::time_point arrival,
                            RunState& st) {
  // Ollama's face: the model loads first if this request's load options are not those it
  // is loaded with; where its layers run sets the pace of the prefill and of each token.
  const bool ollama = req.api == Api::ollama;
  const Clock::time_point ready = ollama ? eng->ready_at(req.model, req.load) : Clock::time_point{};
  const double factor = ollama ? compute_factor(req.load, s) : 1.0;
  // The KV cache holds the prompt and the planned output while the sequence runs.
  const std::int64_t kv = req.prompt_tokens + plan_output(req.max_tokens, s).tokens;
  std::optional<Engine::Slot> slot = co_await enter(*eng, ex, req.api, fault, st, kv);
  if (!slot) co_return;
  const Clock::time_point slot_time = Clock::now();

  ReplyInfo info;
  info.api = req.api;
  info.id = (req.api == Api::anthropic ? "msg_" : req.api == Api::responses ? "resp_" : "chatcmpl-") + new_request_id();
  info.model = req.model;
  info.created = unix_now();
  info.prompt_tokens = req.prompt_tokens;
  info.include_usage = req.include_usage;
  info.logprobs = req.logprobs;
  info.top_logprobs = req.top_logprobs;
  info.echo = req.echo;

  const Answer answer =
      make_answer(req, s, (req.api == Api::anthropic ? "toolu_" : "call_") + new_request_id().substr(0, 24));
  const std::int64_t tokens = answer.tokens();
  std::int64_t abort_at = -1;
  if (fault.kind == FaultKind::abort)
    abort_at = fault.abort_after >= 0 ? std::min(fault.abort_after, tokens) : tokens / 2;

  // Later tokens follow every inter_token (jittered), scheduled from the previous deadline
  // so write time does not accumulate.
  Clock::time_point deadline = first_token_at(*eng, s, fault, req.prompt_tokens, std::max(slot_time, ready), factor);
  const auto itl = std::chrono::duration_cast<nanoseconds>(std::chrono::duration_cast<nanoseconds>(s.inter_token) * factor);
  // A reasoning summary is generated before the answer: its tokens delay the first one.
  for (std::size_t i = 0; i < answer.reasoning.size(); ++i) deadline += eng->jittered(itl, s.jitter);

  auto drop = [&]() {
    eng->count(Engine::Counter::aborted);
    st.finished = true;
    st.abort = true;
  };
  auto gone = [&]() {
    eng->count(Engine::Counter::cancelled);
    st.finished = true;
  };

  // The response head goes out with the first bytes of the stream (an Ollama tool call
  // has none before its last token).
  bool begun = false;
  Clock::time_point first_token = slot_time;
  for (std::int64_t i = 0; i < tokens; ++i) {
    if (i == abort_at) {
      co_await sleep_until(deadline);
      drop();
      co_return;
    }
    co_await sleep_until(deadline);
    if (i == 0) first_token = Clock::now();
    if (req.stream) {
      const std::string chunk = stream_token(info, answer, i);
      if (!chunk.empty()) {
        if (!begun && !co_await ex.begin_stream(200, stream_content_type(req.api), kNoHeaders)) { gone(); co_return; }
        begun = true;
        if (!co_await ex.write_chunk(chunk)) { gone(); co_return; }
      }
    }
    deadline += eng->jittered(itl, s.jitter);
  }
  if (tokens == 0) {
    co_await sleep_until(deadline);
    first_token = Clock::now();
  }
  if (abort_at == tokens) {  // everything but the end of the answer
    drop();
    co_return;
  }

  const Clock::time_point end = Clock::now();
  Timing t;
  t.total_ns = ns_between(arrival, end);
  t.load_ns = ns_between(arrival, slot_time);
  t.prompt_eval_ns = ns_between(slot_time, first_token);
  t.eval_ns = ns_between(first_token, end);
  slot->release();  // the "GPU" is done; only bytes remain to be sent

  if (req.stream) {
    if (!begun && !co_await ex.begin_stream(200, stream_content_type(req.api), kNoHeaders))
      { gone(); co_return; }
    const std::string tail = stream_end(info, answer, t);
    if (!co_await ex.write_chunk(tail) || !co_await ex.end_stream())
      { gone(); co_return; }
  } else {
    http::Response r;
    r.body = full_body(info, answer, t);
    if (!co_await ex.reply(std::move(r))) { gone(); co_return; }
  }
  eng->count(Engine::Counter::completed);
  st.finished = true;
  if (req.unload_after) eng->unload(req.model);
}

// Picks the request's fault (the x-sim-fault header, else a random draw by the rates of
// `s`) and answers the injected errors (429/500/503) and a bad header. nullopt when the
// request has been answered.
asio::awaitable<std::optional<Fault>> pick_fault(Engine& eng, http::Exchange& ex, Api api,
                                                 const config::SimSettings& s) {
  Fault fault;
  if (auto h = ex.request().header("x-sim-fault"); !h.empty()) {
    std::string err;
    if (!parse_fault_header(h, fault, err)) {
      co_await reply_error(ex, api, ErrorKind::bad_request, err);
      co_return std::nullopt;
    }
  } else {
    fault = eng.choose_fault(s);
  }
  switch (fault.kind) {
    case FaultKind::error_429:
      eng.count(Engine::Counter::errors_429);
      co_await reply_error(ex, api, ErrorKind::rate_limited, "simulated rate limit");
      co_return std::nullopt;
    case FaultKind::error_500:
      eng.count(Engine::Counter::errors_500);
      co_await reply_error(ex, api, ErrorKind::internal, "simulated internal error");
      co_return std::nullopt;
    case FaultKind::error_503:
      eng.count(Engine::Counter::errors_503);
      co_await reply_error(ex, api, ErrorKind::unavailable, "simulated service unavailable");
      co_return std::nullopt;
    default:
      co_return fault;
  }
}

// Runs `work` (which sets `st`) against the client leaving.
asio::awaitable<void> run_or_client_gone(Engine& eng, http::Exchange& ex, asio::awaitable<void> work,
                                         RunState& st) {
  auto result = co_await (std::move(work) || ex.wait_client_gone());
  if (result.index() == 1 && !st.finished) eng.count(Engine::Counter::cancelled);
  if (st.abort) {
    // Drop the connection, whatever was sent: a streamed answer stops mid-way, a whole
    // answer never comes. Not an exception: `||` in Boost 1.81 waits for one *successful*
    // side, so a throwing serve() would wait for the client to leave.
    ex.abort();
  }
}

// A request of either kind: counted, parsed (a bad one is answered 400), a fault picked,
// then served, or dropped when the client leaves first.
template <class Req>
asio::awaitable<void> handle_request(std::shared_ptr<Engine> eng, http::Exchange& ex, Api api, Engine::Counter counter,
                                     std::optional<Req> (*parse)(Api, std::string_view, std::string&),
                                     asio::awaitable<void> (*serve_it)(std::shared_ptr<Engine>, http::Exchange&, Req,
                                                                       config::SimSettings, Fault, Clock::time_point,
                                                                       RunState&)) {
  const Clock::time_point arrival = Clock::now();
  eng->count(counter);
  std::string err;
  std::optional<Req> req = parse(api, ex.request().body(), err);
  if (!req) {
    co_await reply_error(ex, api, ErrorKind::bad_request, err);
    co_return;
  }
  const config::SimSettings s = eng->settings();
  std::optional<Fault> fault = co_await pick_fault(*eng, ex, api, s);
  if (!fault) co_return;
  RunState st;
  co_await run_or_client_gone(*eng, ex, serve_it(eng, ex, std::move(*req), s, *fault, arrival, st), st);
}

// An embeddings request after fault selection: hang, slot, the prefill delay, the answer.
// The timing is that of a prompt's first token: ttft + ttft_per_prompt_token_ms x prompt
// tokens (+ slow first token) after the slot was taken; the abort fault drops the
// connection when the answer is due.
asio::awaitable<void> serve_embeddings(std::shared_ptr<Engine> eng, http::Exchange& ex, EmbedRequest req,
                                       config::SimSettings s, Fault fault, Clock::time_point arrival,
                                       RunState& st) {
  std::optional<Engine::Slot> slot = co_await enter(*eng, ex, req.api, fault, st);
  if (!slot) co_return;
  const Clock::time_point slot_time = Clock::now();
  const Clock::time_point deadline = first_token_at(*eng, s, fault, req.prompt_tokens, slot_time);

  std::vector<std::vector<float>> vectors;
  vectors.reserve(req.inputs.size());
  for (const auto& in : req.inputs) vectors.push_back(embed(in, req.dimensions));

  co_await sleep_until(deadline);
  if (fault.kind == FaultKind::abort) {
    eng->count(Engine::Counter::aborted);
    st.finished = true;
    st.abort = true;
    co_return;
  }
  const Clock::time_point end = Clock::now();
  slot->release();

  http::Response r;
  if (req.api == Api::ollama)
    r.body = ollama_embed_body(req, vectors, ns_between(arrival, end), ns_between(arrival, slot_time));
  else
    r.body = openai_embeddings_body(req, vectors);
  if (!co_await ex.reply(std::move(r))) {
    eng->count(Engine::Counter::cancelled);
    st.finished = true;
    co_return;
  }
  eng->count(Engine::Counter::completed);
  st.finished = true;
}


// GET /metrics as vLLM's Prometheus endpoint names its load signals (requests running and
// waiting, the KV cache's use as a fraction), one series per served model name.
std::string vllm_metrics(const Stats& st, const std::vector<std::string>& models) {
  const double usage = st.kv_tokens > 0 ? std::min(1.0, static_cast<double>(st.kv_used) / static_cast<double>(st.kv_tokens)) : 0.0;
  const std::string model = models.empty() ? std::string("sim") : models.front();
  std::string o;
  auto family = [&](std::string_view name, std::string_view type, std::string_view help, double v) {
    o += "# HELP ";
    o += name;
    o += ' ';
    o += help;
    o += "\n# TYPE ";
    o += name;
    o += ' ';
    o += type;
    o += '\n';
    o += name;
    o += "{model_name=\"" + model + "\"} " + std::to_string(v) + "\n";
  };
  family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", static_cast<double>(st.in_flight));
  family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", static_cast<double>(st.waiting));
  family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage);
  family("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.", usage);
  return o;
}

http::Response json_reply(int status, std::string body) {
  http::Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

// Non-generation routes: a complete reply built without suspending.
// GET /api/ps: the models loaded, with their memory (Ollama's shape; `context_length` is
// num_ctx, and `options` the simulator's own: the load options in force).
std::string ollama_ps_body(const Engine& eng) {
  boost::json::array models;
  for (const auto& m : eng.loaded()) {
    models.push_back(boost::json::object{
        {"name", m.name},
        {"model", m.name},
        {"size", m.memory.size},
        {"size_vram", m.memory.vram},
        {"digest", ""},
        {"details", boost::json::object{{"format", "gguf"}, {"family", "sluice-sim"}}},
        {"expires_at", "0001-01-01T00:00:00Z"},
        {"context_length", m.options.num_ctx},
        {"options", boost::json::object{{"num_ctx", m.options.num_ctx},
                                        {"num_gpu", m.options.num_gpu},
                                        {"num_batch", m.options.num_batch}}}});
  }
  return boost::json::serialize(boost::json::object{{"models", std::move(models)}});
}

// POST /api/generate without a prompt, as Ollama clients load and unload models:
// keep_alive 0 unloads at once ("done_reason":"unload"); otherwise the model is loaded with
// the request's options ("load"), which takes load_time when they differ from its own. A
// prompt is refused: the simulator generates through /api/chat.
asio::awaitable<void> generate_load(std::shared_ptr<Engine> eng, http::Exchange& ex) {
  boost::system::error_code ec;
  const auto v = boost::json::parse(ex.request().body(), ec);
  const auto* o = ec ? nullptr : v.if_object();
  const auto* model = o ? o->if_contains("model") : nullptr;
  std::string error;
  LoadOptions load;
  if (!model || !model->is_string() || model->get_string().empty()) {
    error = "model is required";
  } else if (const auto* p = o->if_contains("prompt"); p && !p->is_null() && !(p->is_string() && p->get_string().empty())) {
    error = "the simulator's /api/generate only loads and unloads models (no prompt); generate through /api/chat";
  } else if (const auto* opts = o->if_contains("options"); opts && !opts->is_null()) {
    if (!opts->is_object()) error = "'options' must be an object";
    else read_load_options(opts->get_object(), load, error);
  }
  if (!error.empty()) {
    co_await reply_error(ex, Api::ollama, ErrorKind::bad_request, error);
    co_return;
  }
  const std::string name(model->get_string());
  std::string reason = "unload";
  if (keep_alive_zero(o->if_contains("keep_alive"))) {
    eng->unload(name);
  } else {
    reason = "load";
    co_await sleep_until(eng->ready_at(name, load));
  }
  http::Response r;
  r.body = boost::json::serialize(boost::json::object{{"model", name},
                                                      {"created_at", "1970-01-01T00:00:00Z"},
                                                      {"response", ""},
                                                      {"done", true},
                                                      {"done_reason", reason}});
  co_await ex.reply(std::move(r));
}

http::Response route(Shared& sh, std::string_view method, std::string_view path, std::string_view body) {
  const bool get = method == "GET";
  const bool post = method == "POST";
  Engine& eng = *sh.engine;
  auto method_not_allowed = [] {
    auto r = error_response(Api::openai, ErrorKind::bad_request, "method not allowed");
    r.status = 405;
    return r;
  };
  if (path == "/health") return get ? json_reply(200, R"({"status":"ok"})") : method_not_allowed();
  if (path == "/v1/models")
    return get ? json_reply(200, openai_models_body(sh.models, sh.started_unix)) : method_not_allowed();
  if (path == "/api/tags") return get ? json_reply(200, ollama_tags_body(sh.models)) : method_not_allowed();
  if (path == "/api/version")
    return get ? json_reply(200, R"({"version":"0.0.0-sluice-sim"})") : method_not_allowed();
  if (path == "/api/ps") return get ? json_reply(200, ollama_ps_body(eng)) : method_not_allowed();
  if (path == "/sim/stats") return get ? json_reply(200, stats_json(eng.stats())) : method_not_allowed();
  if (path == "/metrics") {
    if (!get) return method_not_allowed();
    http::Response r = json_reply(200, vllm_metrics(eng.stats(), sh.models));
    r.content_type = "text/plain; version=0.0.4";
    return r;
  }
  if (path == "/sim/reset") {
    if (!post) return method_not_allowed();
    eng.reset_stats();
    return json_reply(200, stats_json(eng.stats()));
  }
  if (path == "/sim/config") {
    if (get) return json_reply(200, settings_json(eng.settings()));
    if (!post) return method_not_allowed();
    std::string err;
    if (!eng.update_settings(body, err)) return error_response(Api::openai, ErrorKind::bad_request, err);
    return json_reply(200, settings_json(eng.settings()));
  }
  if (path == "/") {
    if (!get) return method_not_allowed();
    http::Response r;
    r.content_type = "text/plain";
    r.body = "sluice-sim is running";
    return r;
  }
  return error_response(Api::openai, ErrorKind::not_found,
                        "no route for " + std::string(method) + " " + std::string(path));
}

// POST /v1/moderations, OpenAI's shape: one result per input (a string or an array of
// strings, or of {"type":"text","text":...} parts); flagged when the text holds one of a
// few fixed words (docs/simulator.md), so that a guard in front of a model is testable.
http::Response moderation(std::string_view body) {
  boost::system::error_code ec;
  auto v = boost::json::parse(body, ec);
  const auto* o = ec ? nullptr : v.if_object();
  const auto* in = o ? o->if_contains("input") : nullptr;
  std::vector<std::string> texts;
  if (in && in->is_string()) texts.emplace_back(in->get_string());
  if (in && in->is_array()) {
    for (const auto& e : in->get_array()) {
      if (e.is_string()) texts.emplace_back(e.get_string());
      else if (const auto* t = e.is_object() ? e.get_object().if_contains("text") : nullptr; t && t->is_string()) {
        texts.emplace_back(t->get_string());
      }
    }
  }
  if (texts.empty()) return error_response(Api::openai, ErrorKind::bad_request, "input: expected a string or an array");
  static constexpr std::pair<std::string_view, std::string_view> kWords[] = {
      {"kill", "violence"}, {"bomb", "violence"}, {"weapon", "violence"}, {"hate", "hate"}, {"self-harm", "self-harm"}};
  boost::json::array results;
  for (auto& t : texts) {
    std::string lower = t;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    boost::json::object categories, scores;
    bool flagged = false;
    for (const auto& [word, category] : kWords) {
      const bool hit = lower.find(word) != std::string::npos;
      if (hit) flagged = true;
      categories[category] = categories.contains(category) ? (categories[category].as_bool() || hit) : hit;
      scores[category] = hit ? 0.97 : 0.001;
    }
    results.push_back(boost::json::object{{"flagged", flagged}, {"categories", categories}, {"category_scores", scores}});
  }
  http::Response r;
  r.body = boost::json::serialize(boost::json::object{
      {"id", "modr-" + new_request_id()}, {"model", "omni-moderation-latest"}, {"results", std::move(results)}});
  return r;
}

asio::awaitable<void> handle(std::shared_ptr<Shared> sh, http::Exchange& ex) {
  const auto& rq = ex.request();
  const std::string_view path = rq.path();
  if (path == "/v1/moderations") {
    sh->engine->count(Engine::Counter::moderations);
    http::Response r = rq.method() == "POST" ? moderation(rq.body())
                                             : error_response(Api::openai, ErrorKind::bad_request, "method not allowed");
    if (rq.method() != "POST") r.status = 405;
    co_await ex.reply(std::move(r));
    co_return;
  }
  if (path == "/v1/embeddings" || path == "/api/embed") {
    const Api api = path == "/api/embed" ? Api::ollama : Api::openai;
    if (rq.method() == "POST") {
      co_await handle_request<EmbedRequest>(sh->engine, ex, api, Engine::Counter::embeddings, parse_embed_request,
                                            serve_embeddings);
      co_return;
    }
    http::Response r = error_response(api, ErrorKind::bad_request, "method not allowed");
    r.status = 405;
    co_await ex.reply(std::move(r));
    co_return;
  }
  if (path == "/v1/chat/completions" || path == "/api/chat" || path == "/v1/messages" || path == "/v1/responses") {
    const Api api = path == "/api/chat" ? Api::ollama
                    : path == "/v1/messages" ? Api::anthropic
                    : path == "/v1/responses" ? Api::responses
                                             : Api::openai;
    if (rq.method() == "POST") {
      // Counted as what it is too, so that a test sees which API reached the simulator.
      if (api == Api::responses) sh->engine->count(Engine::Counter::responses);
      co_await handle_request<GenRequest>(sh->engine, ex, api, Engine::Counter::requests, parse_request, serve);
      co_return;
    }
    http::Response r = error_response(api, ErrorKind::bad_request, "method not allowed");
    r.status = 405;
    co_await ex.reply(std::move(r));
    co_return;
  }
  if (path == "/api/generate") {
    if (rq.method() == "POST") {
      co_await generate_load(sh->engine, ex);
      co_return;
    }
    http::Response r = error_response(Api::ollama, ErrorKind::bad_request, "method not allowed");
    r.status = 405;
    co_await ex.reply(std::move(r));
    co_return;
  }
  http::Response r = route(*sh, rq.method(), path, rq.body());
  co_await ex.reply(std::move(r));
}

}  // namespace

struct SimServer::Impl {
  std::shared_ptr<Shared> shared;
  std::unique_ptr<http::Server> server;  // declared last: destroyed first
};

SimServer::SimServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SimServer::~SimServer() {
  if (impl_ && impl_->server) {
    impl_->server->shutdown(std::chrono::milliseconds(0));
    impl_->server->join();
  }
}

std::unique_ptr<SimServer> SimServer::start(SimServerOptions o) {
  auto sh = std::make_shared<Shared>();
  sh->engine = std::make_shared<Engine>(o.settings);  // validates
  sh->models = o.models.empty() ? std::vector<std::string>{"sluice-sim"} : std::move(o.models);
  sh->started_unix = unix_now();

  http::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.workers = std::max(1, o.workers);
  so.max_body_bytes = 16u << 20;
  so.server_name = "sluice-sim";
  so.local_reply = [](int status, std::string_view message) {
    auto r = error_response(Api::openai, ErrorKind::bad_request, message);
    r.status = status;
    return r;
  };
  auto impl = std::make_unique<Impl>();
  impl->shared = sh;
  impl->server = http::Server::start(std::move(so), [sh](int, asio::any_io_executor) -> http::Handler {
    return [sh](http::Exchange& ex) { return handle(sh, ex); };
  });
  return std::unique_ptr<SimServer>(new SimServer(std::move(impl)));
}

std::uint16_t SimServer::port() const { return impl_->server->port(); }
Stats SimServer::stats() const { return impl_->shared->engine->stats(); }
Engine& SimServer::engine() { return *impl_->shared->engine; }
void SimServer::shutdown(std::chrono::milliseconds grace) { impl_->server->shutdown(grace); }
void SimServer::join() { impl_->server->join(); }

}  // namespace sluice::sim
