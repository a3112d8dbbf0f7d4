// The request path: identify, authenticate, parse and validate, route, call the upstream,
// relay (streaming or not), record. See docs/phases.md.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/parse.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <random>

#include "api/codec.hpp"
#include "api/responses.hpp"
#include "common/ids.hpp"
#include "common/clock.hpp"
#include "common/reason.hpp"
#include "common/text.hpp"
#include "filters/registry.hpp"
#include "filters/load_options.hpp"
#include "gateway/admin.hpp"
#include "gateway/live.hpp"
#include "gateway/embed_batch.hpp"
#include "gateway/state.hpp"
#include "console/console.hpp"
#include "history/history.hpp"
#include "http/beast.hpp"
#include "cache/cache.hpp"
#include "llm/chat.hpp"
#include "llm/fold.hpp"
#include "llm/wire.hpp"

namespace sluice::gateway {

namespace net = boost::asio;
using net::awaitable;
using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

namespace {

// A client's text kept in a record (path, error message) is cut here: records wait in the
// access log's queue (65,536 of them at most), and a 16 KiB path twice over each would
// let a flood of 404s hold gigabytes.
constexpr std::size_t kRecordedTextMax = 1024;

// At most `max` bytes of `s`, cut between characters, with "..." when cut.
std::string cut_text(std::string_view s, std::size_t max) {
  if (s.size() <= max) return std::string(s);
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(s.substr(0, cut)) + "...";
}

std::string recorded_text(std::string_view s) { return cut_text(s, kRecordedTextMax); }

double ms_since(Clock::time_point t0, Clock::time_point t1 = Clock::now()) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

Ms left_until(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<Ms>(deadline - Clock::now());
  return d.count() > 0 ? d : Ms(0);
}


// Per-request context: written by the phases in order, read by `record`.
struct LiveRequest;

struct Context {
  Clock::time_point start = Clock::now();
  std::string request_id;
  telemetry::RequestRecord rec;
  const config::ApiKey* key = nullptr;  // into `keys`, which the request holds
  std::shared_ptr<const keys::KeySet> keys;
  http::HeaderList headers;  // sent on every reply of this request
  int metrics_model = -1;    // label indexes (telemetry::Metrics)
  int metrics_tier = -1;
  // The client API (api/codec.hpp): its request, answer and error shapes. OpenAI's for
  // every path that is not a client API's.
  const api::Codec* codec = &api::openai_chat();
  tokenizer::Encoding encoding = tokenizer::Encoding::cl100k_base;  // the route's, for counting tokens
  std::string answer;        // the client's whole answer, kept only when a filter asked (keep_answer)
  bool keep_answer = false;
  std::string completion;    // the same as a chat.completion, kept only when a filter asked (keep_completion)
  bool keep_completion = false;
  cache::Flight* shares = nullptr;  // other requests share this one's generation (filters::Request::shares)
  std::optional<config::Price> price;  // the route's (models[].price): the record's money estimates
  bool batch_follower = false;  // this attempt's answer came from another request's batched call
  filters::Pass* pass = nullptr;  // the request's filters, for their answered hooks
  filters::Reroute reroute;       // where a filter sent the request instead (overload)
  std::uint64_t load_signature = 0;  // load_options steer: prefer a backend loaded with these (0: none)
  std::string_view rerouted_to;   // the light model serving it (the record's served_by)
  LiveRequest* live = nullptr;    // in the worker's list while it runs
  filters::Interrupt interrupt;   // a waiting filter's wake-up, for a cancel from outside
};

// The outcome of relaying one upstream answer.
struct Relay {
  Reason reason = Reason::ok;
  std::string error;
  double ttft_ms = -1;
  Clock::time_point first_token_at{};
  Clock::time_point last_token_at{};
  bool client_gone = false;
  bool error_frame_sent = false;  // the translator already wrote it
};

// The response headers a browser script may read on a CORS reply.
constexpr const char* kCorsExposed =
    "x-request-id, retry-after, x-ratelimit-limit-requests, x-ratelimit-remaining-requests, "
    "x-ratelimit-reset-requests, x-ratelimit-limit-tokens, x-ratelimit-remaining-tokens, x-ratelimit-reset-tokens, "
    "x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset, x-sluice-instance";

// A stream's last writes after its total deadline (the error event, the end) get this
// long: every request ends within timeouts.total and this grace.
constexpr Ms kEndGrace{1000};

// A stream open on a worker: what the drain's cut needs to end it.
// A request in flight on a worker: what /admin/requests lists (live.hpp), and what the
// drain's cut and an operator's cancel need to end it.
struct LiveRequest {
  Context* ctx;
  std::uint64_t id = 0;  // the gateway's own (/admin/requests/<id>/cancel): random, unique in the fleet
  http::AbortHandle* abort = nullptr;  // its upstream exchange, while one runs
  Reason stop = Reason::ok;  // ended from outside: shutting_down (the drain's cut) or cancelled
  bool stream = false;       // streaming to its client now
  std::size_t slot = 0;      // its place in the worker's list
};

// A worker's requests in flight (/admin/requests, cancel, the drain's cut). Held by the
// handler and by each request's frame.
struct LiveList {
  std::vector<LiveRequest*> all;
  void add(LiveRequest& r) {
    r.slot = all.size();
    all.push_back(&r);
  }
  void remove(LiveRequest& r) {
    all[r.slot] = all.back();
    all[r.slot]->slot = r.slot;
    all.pop_back();
  }
};

std::string stop_message(Reason r) {
  return r == Reason::cancelled ? "an operator cancelled this request" : "the gateway is shutting down";
}

class WorkerHandler final : public LiveSource {
 public:
  WorkerHandler(Shared& g, net::any_io_executor ex, bool admin_listener)
      : admin_listener_(admin_listener),
        g_(g),
        cfg_(*g.cfg),
        table_(g.router->table()),
        keys_(*g.keys),
        proxies_(cfg_.trusted_proxies),
        client_(http::Client::create(ex, cfg_.upstream_pool_per_host)),
        cut_timer_(ex) {
    if (g.cache) cache_ = g.cache->for_worker(ex);  // (also on the admin listener: /admin/cache)
    if (!admin_listener_ && g.embed_batches) batcher_ = std::make_unique<EmbedBatcher>(ex, *client_, *g.embed_batches);
    if (admin_listener_) return;  // no requests to limit or count there
    // (Made with no limit in force too: a reload may bring some.)
    if (g.limiter) limiter_ = g.limiter->make_worker(ex);
    if (g.metrics) metrics_ = &g.metrics->add_worker();
    if (g.conversations) conversations_ = g.conversations->for_worker(ex);
    chain_ = std::make_shared<const filters::Chain>(filters::make_chain(
        {.cfg = cfg_,
         .limiter = limiter_.get(),
         .gate = g.gate,
         .tokens = &g.tokens,
         .count_prompts = g.count_prompts,
         .conversations = conversations_,
         .cache = cache_,
         .cache_counters = g.cache ? &g.cache->counters() : nullptr,
         .flights = g.cache ? &g.cache->flights() : nullptr,
         .guards = g.guards,
         .client = client_.get()}));
  }

  awaitable<void> handle(http::Exchange& ex) {
    Context ctx;
    const auto& req = ex.request();
    auto rid = req.header("x-request-id");
    ctx.request_id = valid_request_id(rid) ? std::string(rid) : new_request_id();
    ctx.headers.emplace_back("x-request-id", ctx.request_id);
    ctx.rec.unix_ms = unix_ms_now();
    ctx.rec.request_id = ctx.request_id;
    ctx.rec.method = req.method();
    ctx.rec.path = recorded_text(req.path());
    ctx.rec.instance = g_.instance;
    ctx.rec.client = proxies_.empty() ? std::string(req.peer())
                                      : proxies_.client(req.peer(), req.header_list("x-forwarded-for"));

    if (co_await serve_local(ex, ctx)) co_return;
    // In flight from here until the coroutine ends, however it ends.
    // (The frame holds the worker's list and the metrics, not the handler: a frame destroyed
    // at a forced stop, after its handler, still unlists itself.)
    LiveRequest live{&ctx};
    struct InFlight {
      std::shared_ptr<LiveList> list;
      LiveRequest& live;
      telemetry::Metrics::Worker* m;
      ~InFlight() {
        list->remove(live);
        if (m) m->request_finished();
      }
    } in_flight{live_, live, metrics_};
    live.id = next_live_id();
    live_->add(live);
    ctx.live = &live;
    if (metrics_) metrics_->request_started();
    // A request ended by an exception (the server answers 500 unless the reply began) is
    // still a record: counted, logged, in the history and the events.
    try {
      co_await route(ex, ctx, req.path(), req.method());
    } catch (...) {
      std::string what = "internal error";
      try {
        throw;
      } catch (const std::exception& e) {
        what += ": ";
        what += e.what();
      } catch (...) {
      }
      if (!ex.started() || ctx.rec.status == 0) ctx.rec.status = 500;
      ctx.rec.reason = Reason::internal;
      ctx.rec.error = recorded_text(what);
      record(ctx);
      throw;
    }
    record(ctx);
  }

 private:
  // What is served before a request is in flight (and never reaches a model): CORS
  // preflights, the probes, the console's files, the status pages, the admin API, the
  // admin listener's own paths. True when it answered. (Its own coroutine: the frame of
  // a request in flight, held for a whole stream, keeps none of this.)
  awaitable<bool> serve_local(http::Exchange& ex, Context& ctx) {
    const auto& req = ex.request();
    const auto path = req.path();
    const auto method = req.method();
    // Browser clients on other origins (cors.allowed_origins): a preflight is answered
    // here; any other request from an allowed origin gets the CORS headers on its reply.
    if (!admin_listener_ && cfg_.cors.enabled()) {
      if (const auto origin = req.header("origin"); !origin.empty()) {
        const bool preflight = method == "OPTIONS" && !req.header("access-control-request-method").empty();
        if (cfg_.cors.allows(origin)) {
          ctx.headers.emplace_back("Access-Control-Allow-Origin", std::string(origin));
          ctx.headers.emplace_back("Vary", "Origin");
          if (preflight) {
            co_await cors_preflight(ex, ctx);
            co_return true;
          }
          ctx.headers.emplace_back("Access-Control-Expose-Headers", kCorsExposed);
        } else if (preflight) {
          ctx.rec.to_sinks = false;  // the access log keeps the line
          co_await local_reply(ex, ctx, Reason::forbidden, "origin '" + recorded_text(origin) + "' is not allowed");
          record(ctx);
          co_return true;
        }
      }
    }
    if (admin_listener_ && console::foreign_browser(req.header("origin"), req.header("host"),
                                                     req.header("sec-fetch-site"), req.header("sec-fetch-mode"))) {
      co_await ex.reply(json_reply(403, error_body(Reason::forbidden, "the admin listener serves browsers only at an IP address or localhost, from its own pages"), ctx));
      co_return true;
    }
    if (path == "/health") {
      co_await ex.reply(json_reply(200, R"({"status":"ok"})", ctx));
      co_return true;  // probes are not logged
    }
    if (path == "/ready") {
      auto [ready, body] = render_ready(g_);
      co_await ex.reply(json_reply(ready ? 200 : 503, std::move(body), ctx));
      co_return true;
    }
    if (cfg_.console && (path == "/console" || path.starts_with("/console/"))) {
      console::Reply page = console::serve(method, path, req.header("if-none-match"), admin_listener_);
      http::Response r;
      r.status = page.status;
      r.content_type = std::move(page.content_type);
      r.body = std::move(page.body);
      r.headers = std::move(page.headers);
      co_await ex.reply(std::move(r));
      co_return true;  // the console's files are not logged (what it reads is)
    }
    if (path == "/metrics" || path == "/infra") {
      // They hold counts and states, never a key or a prompt, but also backend addresses,
      // every route and where the database is: on the main listener only an admin key
      // reads them (unless admin.public_status); the admin listener needs none.
      if (!admin_listener_ && !cfg_.public_status) {
        auto denied = authenticate(ex, ctx);
        if (denied || (!ctx.key->admin && !ctx.key->viewer)) {  // a viewer reads what an admin reads
          ctx.rec.to_sinks = false;  // the access log keeps the line
          if (denied) co_await auth_failure(ex, ctx, *denied);
          else co_await local_reply(ex, ctx, Reason::forbidden, "only an admin key may read " + std::string(path));
          record(ctx);
          co_return true;
        }
      }
      http::Response r = json_reply(200, path == "/metrics" ? render_metrics(g_) : render_infra(g_), ctx);
      if (path == "/metrics") r.content_type = "text/plain; version=0.0.4";
      co_await ex.reply(std::move(r));
      co_return true;
    }
    if (path.starts_with("/admin/")) {
      co_await admin(ex, ctx, method, path);
      co_return true;
    }
    if (admin_listener_) {
      if (path == "/history" || path == "/history/stats") {  // every key's, as an admin key reads them
        ctx.rec.to_sinks = false;  // a read (the access log keeps the line)
        ctx.key = &admin_listener_key();
        ctx.rec.key_name = ctx.key->name;
        if (method != "GET" && method != "HEAD") {
          co_await local_reply(ex, ctx, Reason::method_not_allowed, "use GET for " + std::string(path));
        } else {
          co_await history_query(ex, ctx, path == "/history/stats");
        }
        record(ctx);
        co_return true;
      }
      co_await ex.reply(json_reply(404, error_body(Reason::not_found, "the admin listener serves /health, /ready, /metrics, /infra, /history, /admin/ and /console/"), ctx));
      co_return true;
    }
    co_return false;
  }

  // The request by its path and method (all but the probes and the status pages). Not a
  // coroutine: it returns the one that serves the request, so no frame of its own stays
  // on a stream's stack.
  awaitable<void> route(http::Exchange& ex, Context& ctx, std::string_view path, std::string_view method) {
    const auto& req = ex.request();
    if (const api::Endpoint* api = api::endpoint(path)) {
      ctx.codec = api->codec;
      if (method != "POST") {
        return local_reply(ex, ctx, Reason::method_not_allowed, "use POST for " + std::string(path));
      } else if (auto denied = authenticate(ex, ctx)) {
        return auth_failure(ex, ctx, *denied);
      } else if (api->op == api::Op::count_tokens) {
        return count_tokens(ex, ctx);
      } else {
        return generate(ex, ctx);
      }
    } else if (path == "/history" || path == "/history/stats") {
      // A query of the records is not itself a record (the access log keeps its line);
      // a failed authentication is (request.auth_failed).
      if (method != "GET" && method != "HEAD") {  // HEAD: the server sends the head only
        ctx.rec.to_sinks = false;
        return local_reply(ex, ctx, Reason::method_not_allowed, "use GET for " + std::string(path));
      } else if (auto denied = authenticate(ex, ctx)) {
        return auth_failure(ex, ctx, *denied);
      } else {
        ctx.rec.to_sinks = false;
        return history_query(ex, ctx, path == "/history/stats");
      }
    } else if (path.starts_with("/v1/responses/")) {
      ctx.rec.to_sinks = false;  // a read of what was stored (the access log keeps the line)
      if (method == "POST") {  // (cancel, input_tokens: not served)
        return local_reply(ex, ctx, Reason::not_found, "no route for POST " + recorded_text(path));
      } else if (method != "GET" && method != "HEAD" && method != "DELETE") {
        return local_reply(ex, ctx, Reason::method_not_allowed, "use GET or DELETE for " + std::string(path));
      } else if (auto denied = authenticate(ex, ctx)) {
        return auth_failure(ex, ctx, *denied);
      } else {
        return stored_response(ex, ctx, path.substr(std::string_view("/v1/responses/").size()), method);
      }
    } else if (path == "/v1/models" || path.starts_with("/v1/models/")) {
      if (!req.header("anthropic-version").empty()) ctx.codec = &api::anthropic_messages();  // an Anthropic SDK
      if (method != "GET" && method != "HEAD") {
        return local_reply(ex, ctx, Reason::method_not_allowed, "use GET for " + std::string(path));
      } else if (auto denied = authenticate(ex, ctx)) {
        return auth_failure(ex, ctx, *denied);
      } else {
        return models(ex, ctx, path.substr(std::min(path.size(), std::string_view("/v1/models/").size())));
      }
    } else {
      return local_reply(ex, ctx, Reason::not_found, "no route for " + std::string(method) + " " + std::string(path));
    }
  }

  // A CORS preflight from an allowed origin (its Allow-Origin header is set): the methods,
  // the headers it asked for (when they are plain header names) and how long to keep it.
  awaitable<void> cors_preflight(http::Exchange& ex, Context& ctx) {
    static constexpr std::string_view kDefaultHeaders =
        "authorization, content-type, x-api-key, anthropic-version, x-request-id, x-priority";
    std::string_view asked = ex.request().header("access-control-request-headers");
    const bool plain = !asked.empty() && asked.size() <= 1024 &&
                       asked.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_, ") ==
                           std::string_view::npos;
    ctx.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    ctx.headers.emplace_back("Access-Control-Allow-Headers", std::string(plain ? asked : kDefaultHeaders));
    ctx.headers.emplace_back("Access-Control-Max-Age",
                             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(cfg_.cors.max_age).count()));
    ctx.rec.status = 200;
    ctx.rec.to_sinks = false;  // the access log keeps the line
    http::Response r = json_reply(200, std::string(), ctx);
    r.content_type = {};
    co_await ex.reply(std::move(r));
    record(ctx);
  }

  // The request's reply: takes the headers collected for it (a request has one reply).
  http::Response json_reply(int status, std::string body, Context& ctx) {
    http::Response r;
    r.status = status;
    r.body = std::move(body);
    r.headers = std::move(ctx.headers);
    return r;
  }

  awaitable<void> local_reply(http::Exchange& ex, Context& ctx, Reason reason, std::string message,
                              std::string_view param = {}) {
    ctx.rec.status = http_status(reason);
    ctx.rec.reason = reason;
    ctx.rec.error = recorded_text(message);
    if (reason == Reason::client_closed) co_return;  // nobody to answer
    std::string body = ctx.codec->error_body(reason, message, param);
    co_await ex.reply(json_reply(http_status(reason), std::move(body), ctx));
  }

  // Phase: authenticate. Deny by default. Returns the reason of a failure.
  std::optional<Reason> authenticate(http::Exchange& ex, Context& ctx) {
    const auto& req = ex.request();
    std::string_view secret;
    auto authz = req.header("authorization");
    if (authz.size() > 7 && iequals(authz.substr(0, 7), "bearer ")) {
      secret = authz.substr(7);
      while (!secret.empty() && secret.front() == ' ') secret.remove_prefix(1);
    } else {
      secret = req.header("x-api-key");
    }
    if (secret.empty()) return Reason::missing_key;
    const std::int64_t now_ms = unix_ms_now();
    auto found = keys_.find(secret, now_ms);
    if (!found.entry) {
      ctx.rec.key_masked = mask_key(secret);
      return Reason::invalid_key;
    }
    found.entry->note_use(now_ms);  // (the key store reports it: last_used_ms)
    ctx.keys = std::move(found.set);
    ctx.key = &found.entry->key;
    // (Interned: the record may outlive the key set, in the access log's queue.)
    ctx.rec.key_name = found.entry->record_name;
    ctx.rec.key_masked = found.entry->masked;
    ctx.rec.tenant = found.entry->record_tenant;
    ctx.rec.tier = found.entry->record_tier;
    ctx.metrics_tier = found.entry->metrics_tier;
    return std::nullopt;
  }

  awaitable<void> auth_failure(http::Exchange& ex, Context& ctx, Reason reason) {
    if (reason == Reason::missing_key) {
      co_await local_reply(ex, ctx, Reason::missing_key,
                           "no API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'");
    } else {
      co_await local_reply(ex, ctx, Reason::invalid_key, "the API key is not valid");
    }
  }

  // GET /history and /history/stats. A key sees its own requests only; an admin key sees
  // everyone's. The query runs on the query thread: a database read never blocks a worker.
  awaitable<void> history_query(http::Exchange& ex, Context& ctx, bool stats) {
    if (!g_.history) {
      co_await local_reply(ex, ctx, Reason::not_found, "the request history is off (history.backend: none)");
      co_return;
    }
    const auto target = ex.request().target();
    const auto q = target.find('?');
    const std::string_view qs = q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);
    std::string error;
    std::optional<history::ListQuery> list;
    std::optional<history::StatsQuery> agg;
    if (stats) agg = history::parse_stats_query(qs, error);
    else list = history::parse_list_query(qs, error);
    if (!list && !agg) {
      co_await local_reply(ex, ctx, Reason::invalid_request, std::move(error));
      co_return;
    }
    std::string& key = stats ? agg->key : list->key;
    if (!ctx.key->admin && !ctx.key->viewer) {
      if (!key.empty() && key != ctx.key->name) {
        co_await local_reply(ex, ctx, Reason::forbidden, "only an admin key may read other keys' history", "key");
        co_return;
      }
      key = ctx.key->name;
    }
    // On the query thread; the answer comes back to this worker. (A named lambda: GCC 12
    // mishandles capturing lambda temporaries inside co_await expressions.)
    auto run = [&]() -> awaitable<history::Result> { co_return stats ? g_.history->stats(*agg) : g_.history->list(*list); };
    history::Result res = co_await net::co_spawn(g_.query_executor, run, net::use_awaitable);
    if (!res.ok()) {
      co_await local_reply(ex, ctx, res.unavailable ? Reason::history_unavailable : Reason::invalid_request,
                           std::move(res.error));
      co_return;
    }
    ctx.rec.status = 200;
    co_await ex.reply(json_reply(200, std::move(res.body), ctx));
  }

  static std::string_view query_string(const http::Exchange& ex) {
    const auto target = ex.request().target();
    const auto q = target.find('?');
    return q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);
  }

  // /admin/ (admin.cpp). Reading needs an admin or viewer key, a change an admin key; on the
  // admin listener no key is asked. Not a request record: the access log keeps the line,
  // and a change is an audit record of its own.
  awaitable<void> admin(http::Exchange& ex, Context& ctx, std::string_view method, std::string_view path) {
    // A change refused for its key (401, 403) is a record, as any request's: the history and
    // the events show who tried. One made is an audit record instead (admin.cpp).
    const bool change = method != "GET" && method != "HEAD";
    ctx.rec.to_sinks = change;
    const config::ApiKey* by = &admin_listener_key();
    if (admin_listener_) {
      ctx.rec.key_name = by->name;
    } else if (auto denied = authenticate(ex, ctx)) {
      co_await auth_failure(ex, ctx, *denied);
      by = nullptr;
    } else if (!ctx.key->admin && !ctx.key->viewer) {
      co_await local_reply(ex, ctx, Reason::forbidden, "only an admin key (or a viewer key, to read) may use " + recorded_text(path));
      by = nullptr;
    } else {
      by = ctx.key;
    }
    if (by) {
      AdminCall call{.method = method,
                     .path = path,
                     .query = query_string(ex),
                     .body = ex.request().body(),
                     .by = by,
                     .request_id = ctx.request_id,
                     .keys = keys_.get(),
                     .table = table(),
                     .cache = cache_.get()};
      ctx.rec.to_sinks = false;
      AdminAnswer answer = co_await admin_call(g_, call);
      if (change && answer.reason == Reason::forbidden) ctx.rec.to_sinks = true;  // (a viewer's change)
      if (answer.reason != Reason::ok) {
        co_await local_reply(ex, ctx, answer.reason, std::move(answer.body), answer.param);
      } else {
        ctx.rec.status = answer.status;
        co_await ex.reply(json_reply(answer.status, std::move(answer.body), ctx));
      }
    }
    record(ctx);
  }

  // Who acts on the admin listener, where no key is asked.
  static const config::ApiKey& admin_listener_key() {
    static const config::ApiKey k = [] {
      config::ApiKey a;
      a.name = "admin-listener";
      a.admin = true;
      return a;
    }();
    return k;
  }

  // POST /v1/messages/count_tokens: the prompt's tokens by OpenAI's chat formula, exact
  // with the BPE where its rank files are loaded (with token quotas), else estimated.
  // Anthropic's tokenizer is not public: for Claude models this is an approximation.
  awaitable<void> count_tokens(http::Exchange& ex, Context& ctx) {
    auto parsed = ctx.codec->decode(ex.request().body(), api::Op::count_tokens, cfg_);
    if (auto* err = std::get_if<llm::RequestError>(&parsed)) {
      co_await local_reply(ex, ctx, err->reason, err->message, err->param);
      co_return;
    }
    auto& creq = std::get<llm::ChatRequest>(parsed);
    ctx.rec.alias = creq.model;
    const std::shared_ptr<const RoutingTable> tab = table();
    const RouteRuntime* rr = tab->find(creq.model);
    if (!rr) {
      co_await local_reply(ex, ctx, Reason::model_not_found, "model '" + creq.model + "' does not exist", "model");
      co_return;
    }
    // Model access and the key's request rate limits (it spends no tokens, so the token
    // quotas do not apply; counting a large prompt exactly is real work).
    filters::Request freq = filter_request(filters::Kind::count_tokens, ex, ctx, creq, *rr, *tab);
    filters::Pass pass(chain_, freq);
    bool admitted = false;
    try {
      admitted = co_await run_phase(pass, filters::Phase::request, ex, ctx) &&
                 co_await run_phase(pass, filters::Phase::admit, ex, ctx);
    } catch (...) {
      pass.end();
      throw;
    }
    pass.end();
    if (!admitted) co_return;
    const auto n = llm::count_prompt_tokens(creq, g_.tokens, tokenizer::encoding_for_model(rr->route->primary().model));
    // (The record's tokens are what was charged: nothing here. The count is the answer.)
    ctx.rec.status = 200;
    co_await ex.reply(json_reply(200, ctx.codec->token_count(n), ctx));
  }

  // GET /v1/models (`one` empty) and GET /v1/models/{model}: the aliases the key may use.
  // Anthropic clients (they send anthropic-version) get the Models API's shapes. A model
  // the key may not use is as absent as one that does not exist (404 model_not_found).
  awaitable<void> models(http::Exchange& ex, Context& ctx, std::string_view one) {
    const auto tab = table();
    auto entry = [](const config::Route& route) {
      return api::ModelEntry{route.alias, config::to_string(route.primary().provider)};
    };
    std::string body;
    if (!one.empty() || ex.request().path() == "/v1/models/") {
      std::string alias;  // SDKs percent-encode the id (an alias may hold '/')
      if (!percent_decode(one, alias, false)) alias = std::string(one);
      const config::Route* route = tab->cfg->find_route(alias);
      if (!route || !ctx.key->may_use(alias)) {
        co_await local_reply(ex, ctx, Reason::model_not_found, "model '" + alias + "' does not exist", "model");
        co_return;
      }
      ctx.codec->model(body, entry(*route));
    } else {
      std::vector<api::ModelEntry> list;
      for (const auto& route : tab->cfg->routes) {
        if (ctx.key->may_use(route.alias)) list.push_back(entry(route));
      }
      ctx.codec->model_list(body, list);
    }
    ctx.rec.status = 200;
    co_await ex.reply(json_reply(200, std::move(body), ctx));
  }

  // GET /v1/responses/{id}, DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items:
  // the tenant's stored responses (filters/conversations.cpp stores them).
  awaitable<void> stored_response(http::Exchange& ex, Context& ctx, std::string_view rest, std::string_view method) {
    std::string_view id = rest;
    bool items = false;
    if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
      items = rest.substr(slash) == "/input_items";
      id = rest.substr(0, slash);
      if (!items || method == "DELETE") {
        co_await local_reply(ex, ctx, Reason::not_found, "no route for " + std::string(method) + " " +
                                                             recorded_text(ex.request().path()));
        co_return;
      }
    }
    if (const auto q = ex.request().target().find("stream=true"); q != std::string_view::npos) {
      co_await local_reply(ex, ctx, Reason::option_not_allowed,
                           "a stored response is answered whole: streaming it again is not supported", "stream");
      co_return;
    }
    std::optional<conversations::StoredResponse> stored;
    if (conversations_ && !id.empty()) stored = co_await conversations_->get(ctx.key->tenant, std::string(id));
    if (!stored) {
      co_await local_reply(ex, ctx, Reason::not_found, "response '" + recorded_text(id) + "' was not found", "response_id");
      co_return;
    }
    std::string body;
    if (method == "DELETE") {
      if (!co_await conversations_->erase(ctx.key->tenant, std::string(id))) {
        ctx.headers.emplace_back("Retry-After", "1");
        co_await local_reply(ex, ctx, Reason::store_unavailable,
                             "stored responses cannot be deleted while their store (Redis or the database) is unreachable");
        co_return;
      }
      body = R"({"id":)";
      append_json_string(body, id);
      body += R"(,"object":"response","deleted":true})";
    } else if (items) {
      body = api::input_item_list(stored->items, stored->input_from, stored->input_count, id);
    } else {
      body = std::move(stored->response);
    }
    ctx.rec.status = 200;
    co_await ex.reply(json_reply(200, std::move(body), ctx));
  }

  // Phases 4..13 for a generation (any client API: its codec decodes the request).
  awaitable<void> generate(http::Exchange& ex, Context& ctx) {
    // Parse and validate, into the internal (chat-completions) form.
    auto parsed = ctx.codec->decode(ex.request().body(), api::Op::generate, cfg_);
    if (auto* err = std::get_if<llm::RequestError>(&parsed)) {
      co_await local_reply(ex, ctx, err->reason, err->message, err->param);
      co_return;
    }
    auto& creq = std::get<llm::ChatRequest>(parsed);
    ctx.rec.alias = creq.model;
    ctx.rec.stream = creq.stream;

    // Route. The table is held until the request ends: a reload never changes it midway.
    const std::shared_ptr<const RoutingTable> tab = table();
    const RouteRuntime* rr = tab->find(creq.model);
    if (!rr) {
      co_await local_reply(ex, ctx, Reason::model_not_found, "model '" + creq.model + "' does not exist", "model");
      co_return;
    }
    // The request's policies (src/filters, docs/phases.md): model access, billed fields and
    // message caps on the request; then admission (rate limits and token quotas, the
    // concurrency gate), of a request whose record names its model.
    filters::Request freq = filter_request(filters::Kind::generate, ex, ctx, creq, *rr, *tab);
    filters::Pass pass(chain_, freq);
    ctx.pass = &pass;
    struct Unset {
      Context& ctx;
      ~Unset() { ctx.pass = nullptr; }
    } unset{ctx};
    try {
      if (!co_await run_phase(pass, filters::Phase::request, ex, ctx)) co_return;
      ctx.metrics_model = rr->metrics_model;
      ctx.encoding = rr->encoding;
      ctx.price = rr->route->price;
      record_options(creq, ctx.rec);
      const config::Backend& primary = rr->route->primary();
      ctx.rec.model = rr->members.front()->record_model;  // interned: the record outlives the table
      ctx.rec.provider = config::to_string(primary.provider);
      if (co_await run_phase(pass, filters::Phase::admit, ex, ctx)) co_await overload_or_dispatch(ex, ctx, creq, *rr, *tab);
    } catch (...) {
      // A request ended by an exception still runs the end hooks: its reservation (maybe a
      // worker's token lease) would stay held otherwise. (A catch, not a destructor: a
      // frame destroyed at shutdown may outlive the limiter.)
      pass.end();
      throw;
    }
    pass.end();
  }

  // Admitted: to the route's backends, or where the gate sent it on overload (the light
  // model's backends, or the canned reply).
  awaitable<void> overload_or_dispatch(http::Exchange& ex, Context& ctx, llm::ChatRequest& creq, const RouteRuntime& rr,
                                       const RoutingTable& tab) {
    if (ctx.reroute.canned && rr.route->canned_reply && creq.task == llm::Task::chat) {
      rr.stats->overload_canned.fetch_add(1, std::memory_order_relaxed);
      co_await canned_reply(ex, ctx, creq, *rr.route->canned_reply, "overload: the model's queue is full or its wait too long");
      co_return;
    }
    const RouteRuntime* light = ctx.reroute.model.empty() ? nullptr : tab.find(ctx.reroute.model);
    if (!light) {
      co_await dispatch(ex, ctx, creq, rr);
      co_return;
    }
    rr.stats->overload_light.fetch_add(1, std::memory_order_relaxed);
    ctx.rerouted_to = light->record_alias;
    // Requests that joined this one's generation asked for the model itself: they make
    // their own (and degrade on their own if they must).
    if (ctx.shares) {
      ctx.shares->fail(Reason::queue_full, "the shared generation went to the overload model");
      ctx.shares = nullptr;
    }
    ctx.rec.model = light->members.front()->record_model;
    ctx.rec.provider = config::to_string(light->route->primary().provider);
    ctx.price = light->route->price;
    ctx.encoding = light->encoding;
    co_await dispatch(ex, ctx, creq, *light);
  }

  // The answer is whole and good, its last bytes not yet sent: the filters' answered hooks
  // (what the cache keeps is kept before the client can ask again). A hook that fails
  // costs the client nothing.
  static void answered(Context& ctx) noexcept {
    if (!ctx.pass) return;
    try {
      ctx.pass->answered();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice: a filter's answered hook failed: %s\n", e.what());
    } catch (...) {
    }
  }

  filters::Request filter_request(filters::Kind kind, http::Exchange& ex, Context& ctx, llm::ChatRequest& creq,
                                  const RouteRuntime& rr, const RoutingTable& tab) {
    return filters::Request{.kind = kind,
                            .key = *ctx.key,
                            .chat = creq,
                            .api = ctx.codec->name(),
                            .ex = ex,
                            .route = {.config = rr.route,
                                      .table = tab.cfg.get(),
                                      .wires = rr.wires,
                                      .strict_wires = rr.strict_wires,
                                      .native = served_natively(rr, *ctx.codec),
                                      .encoding = rr.encoding},
                            .reply_headers = ctx.headers,
                            .rec = ctx.rec,
                            .answer = &ctx.answer,
                            .keep_answer = &ctx.keep_answer,
                            .completion = &ctx.completion,
                            .keep_completion = &ctx.keep_completion,
                            .shares = &ctx.shares,
                            .reroute = &ctx.reroute,
                            .load_signature = &ctx.load_signature,
                            .interrupt = &ctx.interrupt};
  }

  // Whether every backend that may serve the route (its own, its canary's, its fallbacks')
  // serves the client's API itself.
  static bool served_natively(const RouteRuntime& rr, const api::Codec& codec) {
    auto all = [&codec](const RouteRuntime* set) {
      if (!set) return true;
      for (const auto& m : set->members) {
        if (!codec.native_on(m->cfg)) return false;
      }
      return true;
    };
    if (!all(&rr) || !all(rr.canary)) return false;
    for (const auto* f : rr.fallbacks) {
      if (!all(f)) return false;
    }
    return true;
  }

  // One phase of the chain; false when a filter ended the request. Its end hooks then run
  // at once (a reservation or a slot is not held while the refusal is written), and the
  // reply is made here: a local reply with the filter's reason, and Retry-After if set.
  awaitable<bool> run_phase(filters::Pass& pass, filters::Phase phase, http::Exchange& ex, Context& ctx) {
    filters::Next n = pass.run(phase);
    if (n == filters::Next::wait) n = co_await pass.resume(phase);
    if (n == filters::Next::go) co_return true;
    auto& stop = pass.stop();
    if (stop.reason == Reason::queued) {
      // A filter's notice (the gate: the wait would be longer than the client accepts).
      pass.end();
      ctx.rec.status = http_status(Reason::queued);
      ctx.rec.reason = Reason::queued;
      ctx.rec.error = recorded_text(stop.message);
      if (stop.retry_after_ms >= 0) {
        ctx.headers.emplace_back("Retry-After", std::to_string(std::max<std::int64_t>((stop.retry_after_ms + 999) / 1000, 1)));
      }
      co_await ex.reply(json_reply(ctx.rec.status, std::move(stop.body), ctx));
      co_return false;
    }
    if (stop.answer && stop.reason == Reason::ok) {
      // A filter's own answer (a cache hit): sent first, then the end hooks (which may
      // keep what was sent).
      co_await local_answer(ex, ctx, pass.request().chat, *stop.answer);
      pass.end();
      co_return false;
    }
    pass.end();
    if (stop.reason == Reason::ok) {  // a filter stopped without saying why
      stop.reason = Reason::internal;
      stop.message = "a request filter stopped the request without a reason";
    }
    if (stop.retry_after_ms >= 0) {
      ctx.headers.emplace_back("Retry-After", std::to_string(std::max<std::int64_t>((stop.retry_after_ms + 999) / 1000, 1)));
    }
    co_await local_reply(ex, ctx, stop.reason, std::move(stop.message), stop.param);
    co_return false;
  }

  // Settlement's rule, on every path: the upstream's usage where it is valid (a
  // non-negative integer; the parsers read anything else as -1), else the exact count of
  // what was sent and relayed. The prompt: counted with the route's BPE when its rank file
  // is loaded (and the body is small enough to count), else the reservation's prompt bound.
  std::int64_t settled_prompt(std::int64_t reported, const llm::ChatRequest& creq, const Context& ctx,
                              std::size_t body_bytes) const {
    if (reported >= 0) return reported;
    if (g_.tokens.exact(ctx.encoding) && body_bytes <= llm::kExactCountMaxBytes) {
      return llm::count_prompt_tokens(creq, g_.tokens, ctx.encoding);
    }
    return llm::prompt_token_bound(creq);
  }

  // The request options worth grouping by in the history (set by the client only).
  static void record_options(const llm::ChatRequest& creq, telemetry::RequestRecord& rec) {
    auto num = [](const boost::json::object& o, std::string_view k, double& out) {
      if (const auto* v = o.if_contains(k); v && v->is_number()) out = v->to_number<double>();
    };
    auto integer = [](const boost::json::object& o, std::string_view k, std::int64_t& out) {
      if (const auto* v = o.if_contains(k); v && v->is_number()) out = static_cast<std::int64_t>(v->to_number<double>());
    };
    num(creq.body, "temperature", rec.temperature);
    num(creq.body, "top_p", rec.top_p);
    if (creq.max_tokens) rec.max_tokens = *creq.max_tokens;
    if (const auto* o = creq.body.if_contains("options"); o && o->is_object()) {
      const auto& opts = o->get_object();
      num(opts, "temperature", rec.temperature);
      num(opts, "top_p", rec.top_p);
      if (rec.max_tokens < 0) integer(opts, "num_predict", rec.max_tokens);
      integer(opts, "num_ctx", rec.num_ctx);
      integer(opts, "num_gpu", rec.num_gpu);
      integer(opts, "num_batch", rec.num_batch);
    }
  }

  struct ErrorAnswer {
    int status = 0;
    std::string body;
    std::string retry_after;
  };

  // A failure before any byte reached the client: the dispatcher may still try elsewhere.
  struct Failure {
    Reason reason = Reason::upstream_error;
    std::string message;
    std::optional<ErrorAnswer> answer;  // a non-2xx upstream answer
  };

  // Whether another backend might do better (the upstream's fault, and time is left).
  static bool retryable(const Failure& f) {
    if (f.answer) return f.answer->status == 429 || f.answer->status >= 500;
    switch (f.reason) {
      case Reason::upstream_unreachable:
      case Reason::upstream_error:
      case Reason::upstream_bad_response:
      case Reason::upstream_stream_failed:
      case Reason::first_token_timeout:
      case Reason::upstream_idle_timeout:
      case Reason::local_resources:  // fds may be free again a moment later
        return true;
      default:
        return false;
    }
  }

  // Whether a finished exchange that was answered counts against the backend.
  static bool upstream_failed(const telemetry::RequestRecord& r) {
    switch (r.reason) {
      case Reason::upstream_unreachable:
      case Reason::upstream_bad_response:
      case Reason::upstream_stream_failed:
      case Reason::upstream_timeout:
      case Reason::first_token_timeout:
      case Reason::upstream_idle_timeout:
        return true;
      default:
        return r.upstream_status >= 500 || r.upstream_status == 429 ||
               (r.reason == Reason::upstream_error && r.upstream_status == 0);
    }
  }

  awaitable<void> reply_failure(http::Exchange& ex, Context& ctx, Failure& f, config::Provider wire) {
    if (f.answer) {
      co_await reply_upstream_error(ex, ctx, *f.answer, wire);
    } else {
      co_await local_reply(ex, ctx, f.reason, std::move(f.message));
    }
  }

  // Phase: choose a backend and call it; retry elsewhere, then on the fallbacks, while
  // nothing has reached the client. The canary or the stable set first, then the other.
  awaitable<void> dispatch(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, const RouteRuntime& rr) {
    const RouteRuntime* order[2 + config::Route::kMaxFallbacks];
    std::size_t n_sets = 0;
    bool canary_first = false;
    if (rr.canary && rr.judge && !rr.judge->rolled_back()) {
      const auto h = ex.request().header("x-canary");
      if (h == "true" || h == "1") canary_first = true;
      else if (h == "false" || h == "0") canary_first = false;
      else {
        const double share = rr.stats->canary_share(*rr.route->canary);  // an operator's, else the configured
        canary_first = share > 0 && canary_draw(ctx, creq, *rr.route->canary) * 100.0 < share;
      }
      (canary_first ? rr.stats->canary_requests : rr.stats->stable_requests).fetch_add(1, std::memory_order_relaxed);
    }
    if (canary_first) order[n_sets++] = rr.canary;
    order[n_sets++] = &rr;
    for (const auto* f : rr.fallbacks) {
      if (n_sets < std::size(order)) order[n_sets++] = f;
    }
    std::size_t options = 0;
    for (std::size_t k = 0; k < n_sets; ++k) options += order[k]->members.size();
    int attempts_left = 1 + rr.route->retries;
    const auto deadline = ctx.start + cfg_.timeouts.total;
    std::optional<Failure> last;
    config::Provider last_wire = config::Provider::openai;
    std::string tried;  // "name: why; name: why" for the final error
    int attempts = 0;
    auto note = [&tried](const BackendRuntime& be, std::string_view why) {
      if (!tried.empty()) tried += "; ";
      tried += be.name;
      tried += ": ";
      tried += why;
    };
    // Backends tried for this request, across the sets (routes may share backends).
    std::array<const BackendRuntime*, 32> tried_backends{};
    std::size_t n_tried = 0;
    auto was_tried = [&](const BackendRuntime* b) {
      return std::find(tried_backends.begin(), tried_backends.begin() + n_tried, b) != tried_backends.begin() + n_tried;
    };
    // A fallback's or canary's own load_options apply to what goes to its backends (the
    // filter applied the named route's); a value it does not allow skips it.
    std::unique_ptr<llm::ChatRequest> for_set;  // (rare: kept off the frame, which a stream holds)
    for (std::size_t k = 0; k < n_sets && attempts_left > 0; ++k) {
      const RouteRuntime& set = *order[k];
      const llm::ChatRequest* sent = &creq;
      std::uint64_t steer_sig = &set == &rr ? ctx.load_signature : 0;
      if (set.route != rr.route && set.route->load_options) {
        for_set = std::make_unique<llm::ChatRequest>(creq);
        filters::Stop refused;
        if (!filters::apply_load_options(*set.route, for_set->body, refused)) {
          if (!tried.empty()) tried += "; ";
          tried += set.route->alias + ": " + refused.message;
          continue;
        }
        sent = &*for_set;
        if (set.route->load_options->policy == config::LoadPolicy::steer) {
          steer_sig = upstream::load_signature(upstream::load_values(for_set->body));
        }
      }
      std::uint64_t tried_mask = 0;
      std::array<bool, config::Route::kMaxBackends> usable{};
      bool despite_ejection = false;  // set when nothing else is left in this set
      while (attempts_left > 0 && left_until(deadline).count() > 0) {
        // Cancelled by an operator while it waited (queued, in the filters, between
        // attempts): no backend is picked.
        if (auto stopped = stopped_from_outside(ctx)) {
          last = std::move(stopped);
          break;
        }
        const auto now = Clock::now();
        const std::size_t n = std::min<std::size_t>(set.members.size(), usable.size());
        for (std::size_t i = 0; i < n; ++i) {
          if (was_tried(set.members[i].get())) tried_mask |= std::uint64_t{1} << i;
          usable[i] = set.members[i]->usable(now, despite_ejection);
        }
        int pick = -1;
        if (steer_sig != 0) {
          // load_options steer: an Ollama backend whose model is loaded with the request's
          // options first (no reload), least connections among them; else one that has
          // served nothing yet (a load that stalls nobody); else any.
          std::array<bool, config::Route::kMaxBackends> loaded{};
          for (const std::uint64_t want : {steer_sig, std::uint64_t{0}}) {
            for (std::size_t i = 0; i < n; ++i) {
              const BackendRuntime& m = *set.members[i];
              loaded[i] = usable[i] && m.wire == config::Provider::ollama && m.model_load.current() == want;
            }
            pick = set.balancer->pick(std::span<const bool>(loaded.data(), n), tried_mask);
            if (pick >= 0) break;
          }
        }
        if (pick < 0) pick = set.balancer->pick(std::span<const bool>(usable.data(), n), tried_mask);
        if (pick < 0 && !despite_ejection && attempts == 0 && k + 1 == n_sets) {
          // Like nginx with a single server: passive ejection steers traffic to the other
          // backends and sets, but when the last set has only ejected backends left and
          // nothing was tried, they are tried anyway (probes and breakers, explicit
          // verdicts, still keep a backend out).
          despite_ejection = true;
          continue;
        }
        if (pick < 0) {
          for (std::size_t i = 0; i < n; ++i) {
            if (!usable[i] && !(tried_mask >> i & 1)) note(*set.members[i], set.members[i]->state_word(now));
          }
          break;
        }
        tried_mask |= std::uint64_t{1} << pick;
        BackendRuntime& be = *set.members[static_cast<std::size_t>(pick)];
        if (n_tried < tried_backends.size()) tried_backends[n_tried++] = &be;
        // A half-open breaker lets only its probe requests through.
        Passes passes;
        if (be.breaker) passes.backend = be.breaker->allow(now);
        if (passes.backend && be.provider->breaker) {
          passes.provider = be.provider->breaker->allow(now);
          if (!passes.provider && be.breaker) be.breaker->release(passes.backend);
        }
        if (!passes.backend || !passes.provider) {
          note(be, "breaker half-open, probes in flight");
          continue;
        }
        --attempts_left;
        // Retries: further attempts on the model's own backends; fallbacks: every attempt
        // on a fallback model's.
        const bool own = &set == &rr || &set == rr.canary;
        if (!own) rr.stats->fallbacks.fetch_add(1, std::memory_order_relaxed);
        else if (attempts > 0) rr.stats->retries.fetch_add(1, std::memory_order_relaxed);
        ++attempts;
        // The canary judge compares the two sides only (not the fallbacks).
        const bool is_canary = rr.judge && &set == rr.canary;
        const bool judged = rr.judge && (is_canary || &set == &rr);
        // (Named before the answer is whole: the answered hooks read it.)
        ctx.rec.served_by = &set != &rr ? set.record_alias : ctx.rerouted_to;
        auto f = co_await attempt(ex, ctx, *sent, rr, set, pick, be, passes, judged, is_canary);
        if (!f) {
          ctx.rec.attempts = attempts;
          co_return;  // answered (or the client left)
        }
        ctx.rec.served_by = ctx.rerouted_to;
        note(be, f->answer ? "HTTP " + std::to_string(f->answer->status) : f->message);
        last_wire = be.wire;
        const bool again = retryable(*f);
        last = std::move(f);
        if (!again) break;
      }
      if (last && !retryable(*last)) break;
    }
    ctx.rec.attempts = attempts;
    // Nothing answered. With a single possible backend, its own error (as without routing).
    if (last && (options == 1 || !retryable(*last))) {
      co_await reply_failure(ex, ctx, *last, last_wire);
      co_return;
    }
    co_await exhausted(ex, ctx, creq, rr, std::move(tried));
  }

  // Every backend the request could go to was tried or out: the route's canned reply, or
  // no_backend naming what each said. (Its own coroutine: dispatch's frame, held for a
  // whole stream, keeps none of these strings.)
  awaitable<void> exhausted(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, const RouteRuntime& rr,
                            std::string tried) {
    rr.stats->exhausted.fetch_add(1, std::memory_order_relaxed);
    if (rr.route->canned_reply && creq.task == llm::Task::chat) {
      rr.stats->canned.fetch_add(1, std::memory_order_relaxed);
      // Named, not a temporary of a conditional inside co_await: GCC 12 frees such a
      // temporary's buffer while the coroutine still refers to it (ASan caught it).
      std::string why = "no backend could answer";
      if (!tried.empty()) why += " (" + tried + ")";
      co_await canned_reply(ex, ctx, creq, *rr.route->canned_reply, std::move(why));
      co_return;
    }
    std::string message = "no backend of model '" + creq.model + "' could answer";
    if (!tried.empty()) message += " (" + tried + ")";
    ctx.headers.emplace_back("Retry-After", "1");
    co_await local_reply(ex, ctx, Reason::no_backend, std::move(message));
  }

  // Where a request falls in [0, 1) for the canary split: a hash of the key or the user
  // when the canary is sticky (the same client stays on one side while the weight holds),
  // else a draw.
  double canary_draw(const Context& ctx, const llm::ChatRequest& creq, const config::CanaryConfig& c) noexcept {
    std::string_view id;
    if (c.sticky == config::CanarySticky::key && ctx.key) {
      id = ctx.key->name;
    } else if (c.sticky == config::CanarySticky::user) {
      if (const auto* u = creq.body.if_contains("user"); u && u->is_string()) id = u->get_string();
    }
    if (id.empty()) return next_unit();
    std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the canary's alias and the id
    for (char ch : c.alias) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull;
    for (char ch : id) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
    h ^= h >> 33;  // spread the low bits
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return static_cast<double>(h >> 11) * 0x1.0p-53;
  }

  // A live request's id: xorshift64* on a 64-bit random seed per worker (a few ns; ids of
  // requests in flight at once across a fleet do not meet).
  std::uint64_t next_live_id() noexcept {
    live_rng_ ^= live_rng_ >> 12;
    live_rng_ ^= live_rng_ << 25;
    live_rng_ ^= live_rng_ >> 27;
    return live_rng_ * 0x2545F4914F6CDD1Dull;
  }

  static std::string live_id_text(std::uint64_t id) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
    return buf;
  }

  // A uniform number in [0, 1) (canary split), per worker.
  double next_unit() noexcept {
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return static_cast<double>((rng_ * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
  }

  // The route's canned reply: answered as if an OpenAI upstream had sent it, through the
  // same translation as a real answer (so every dialect and streaming work alike).
  awaitable<void> canned_reply(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, const std::string& text,
                               std::string why) {
    ctx.rec.reason = Reason::canned_reply;
    ctx.rec.error = std::move(why);
    ctx.rec.completion_tokens = 0;
    ctx.rec.prompt_tokens = 0;
    ctx.rec.status = 200;
    std::string upstream = llm::canned_openai_answer(creq, ctx.request_id, text);
    if (creq.stream) {
      co_await stream_at_once(ex, ctx, creq, upstream);
      co_return;
    }
    auto done = llm::read_openai_completion(std::move(upstream));
    std::string out = ctx.codec->answer(*done, creq, ctx.request_id);
    if (!co_await ex.reply(json_reply(200, std::move(out), ctx))) ctx.rec.client_cancelled = true;
  }

  // A stream made here (a canned reply, a kept answer: chat.completion.chunk frames, as
  // an OpenAI upstream would send them), sent at once in the client's API. Returns the
  // stream's final object (the Responses API's).
  awaitable<std::string> stream_at_once(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                        std::string_view chunks) {
    auto tr = ctx.codec->stream(llm::make_openai_stream(creq), creq, ctx.request_id);
    std::string frames;
    tr->feed(chunks, frames);
    tr->finish(frames);
    http::HeaderList h = std::move(ctx.headers);
    h.emplace_back("Cache-Control", "no-cache");
    if (!co_await ex.begin_stream(200, "text/event-stream", h) || !co_await ex.write_chunk(frames) ||
        !co_await ex.end_stream()) {
      ctx.rec.client_cancelled = true;
    }
    co_return tr->final_answer();
  }

  // A filter's own answer (filters::LocalAnswer: a cache hit), under this request's id, in
  // the client's API, whole or streamed at once. Nothing was generated: no tokens are
  // charged (the record's saved_tokens says what it spared).
  awaitable<void> local_answer(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                               const filters::LocalAnswer& a) {
    if (a.flight) {
      struct Leave {  // also on an exception: the generation counts its readers
        cache::Flight& f;
        ~Leave() { f.leave(); }
      } leave{*a.flight};
      co_await follow(ex, ctx, creq, *a.flight);
      co_return;
    }
    ctx.rec.prompt_tokens = 0;
    ctx.rec.completion_tokens = 0;
    if (creq.stream) {
      std::string upstream = llm::replay_stream(a.completion, creq, ctx.request_id);
      if (upstream.empty()) {
        co_await local_reply(ex, ctx, Reason::internal, "a cached answer could not be read");
        co_return;
      }
      ctx.rec.status = 200;
      ctx.rec.ttft_ms = ms_since(ctx.start);
      std::string answer = co_await stream_at_once(ex, ctx, creq, upstream);
      if (ctx.keep_answer) ctx.answer = std::move(answer);
      co_return;
    }
    auto done = llm::replay_whole(a.completion, ctx.request_id);
    if (!done) {
      co_await local_reply(ex, ctx, Reason::internal, "a cached answer could not be read");
      co_return;
    }
    std::string out = ctx.codec->answer(*done, creq, ctx.request_id);
    if (ctx.keep_answer) ctx.answer = out;
    ctx.rec.status = 200;
    if (!co_await ex.reply(json_reply(200, std::move(out), ctx))) ctx.rec.client_cancelled = true;
  }

  // A request that joined a generation in flight (coalescing, filters/cache.cpp): the
  // answer is read from it as it comes, from the start, under this request's own id, in
  // its own API, whole or streamed (whatever the leader asked). The client is charged what
  // it got: the whole answer's usage, or (a stream it left) the prompt and what it read.
  awaitable<void> follow(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, cache::Flight& f) {
    std::size_t offset = 0;
    cache::FlightPart p;
    auto settle = [&](bool whole, std::int64_t relayed) {
      ctx.rec.prompt_tokens = p.ok ? f.prompt_tokens() : settled_prompt(-1, creq, ctx, ex.request().body().size());
      ctx.rec.completion_tokens = whole && p.ok ? f.completion_tokens() : relayed;
      if (p.ok) {
        ctx.rec.saved_tokens = f.prompt_tokens() + f.completion_tokens();
        ctx.rec.saved_prompt_tokens = f.prompt_tokens();
      }
    };
    auto left = [&] {
      ctx.rec.client_cancelled = true;
      ctx.rec.status = http_status(Reason::client_closed);
      ctx.rec.reason = Reason::client_closed;
      settle(false, 0);
    };
    if (!creq.stream) {
      // Waits for the end, looking four times a second whether the client is still there
      // (one that left stops reading the generation, which may then end).
      bool gone = false;
      ex.watch_client([&gone] { gone = true; });
      do p = co_await f.next(offset, Ms(250));
      while (!p.ended && !gone);
      ex.unwatch_client();
      if (gone || ex.client_gone()) {
        left();
        co_return;
      }
      auto done = p.ok ? llm::replay_whole(f.completion(), ctx.request_id) : std::nullopt;
      if (!done) {
        // (Named: GCC 12 destroys a conditional temporary passed to a co_await twice.)
        const Reason reason = p.ok ? Reason::internal : p.reason;
        std::string message = p.ok ? std::string("the shared answer could not be read") : p.message;
        co_await local_reply(ex, ctx, reason, std::move(message));
        co_return;
      }
      settle(true, 0);
      std::string out = ctx.codec->answer(*done, creq, ctx.request_id);
      if (ctx.keep_answer) ctx.answer = out;
      ctx.rec.status = 200;
      if (!co_await ex.reply(json_reply(200, std::move(out), ctx))) ctx.rec.client_cancelled = true;
      co_return;
    }
    auto tr = ctx.codec->stream(llm::make_openai_stream(creq), creq, ctx.request_id);
    if (ctx.rec.reserved_tokens >= 0) tr->count_output(&g_.tokens, ctx.encoding);
    std::string first_id, in, out;
    bool any = false, gone = false;
    http::HeaderList h = ctx.headers;
    h.emplace_back("Cache-Control", "no-cache");
    h.emplace_back("X-Accel-Buffering", "no");
    auto write = [&](std::string_view data) -> awaitable<bool> {
      ex.set_write_timeout(cfg_.timeouts.client_write);
      if (!ex.started()) {
        if (!co_await ex.begin_stream(200, "text/event-stream", h)) co_return false;
      }
      co_return data.empty() || co_await ex.write_chunk(data);
    };
    static constexpr std::string_view kDone = "data: [DONE]\n\n";
    bool done_held = false;
    ctx.rec.status = 200;
    do {
      // A heartbeat while the generation is silent (also how a client that left is seen).
      p = co_await f.next(offset, cfg_.timeouts.heartbeat);
      in = std::move(p.frames);
      if (in.empty() && !p.ended) {
        if (!co_await write(": keep-alive\n\n")) {
          gone = true;
          break;
        }
        continue;
      }
      // A leader that was answered whole: its answer as chunks, at the end.
      if (!any && in.empty() && p.ended && p.ok) in = llm::replay_stream(f.completion(), creq, ctx.request_id);
      // The end marker is held back: the usage goes before it when the leader's frames had
      // none (its client did not ask for it; this one's API may need it).
      if (in.ends_with(kDone)) {
        in.resize(in.size() - kDone.size());
        done_held = true;
      }
      any = any || !in.empty();
      out.clear();
      if (!in.empty()) tr->feed(llm::reid_frames(in, first_id, ctx.request_id), out);
      if (p.ended && p.ok) {
        if (tr->usage().prompt_tokens < 0 || tr->usage().completion_tokens < 0) {
          std::string usage = llm::chunk_prefix(ctx.request_id, creq.model);
          usage += R"(],"usage":)";
          llm::append_usage(usage, f.prompt_tokens(), f.completion_tokens());
          usage += "}\n\n";
          tr->feed(usage, out);
        }
        if (done_held) tr->feed(kDone, out);
        tr->finish(out);
      }
      if (ctx.rec.ttft_ms < 0 && tr->first_token_seen()) ctx.rec.ttft_ms = ms_since(ctx.start);
      if (!co_await write(out)) {
        gone = true;
        break;
      }
    } while (!p.ended);
    if (gone) {
      left();
      ctx.rec.completion_tokens = tr->relayed_tokens();
      co_return;
    }
    if (!p.ok) {
      ctx.rec.reason = p.reason;
      ctx.rec.error = p.message;
      if (tr->error().empty()) {  // (an upstream error event already went out as the leader's frames)
        std::string frame = tr->error_event(p.reason, p.message);
        if (frame.empty()) frame = ctx.codec->error_event(p.reason, p.message);
        co_await ex.write_chunk(frame);
      }
    } else if (ctx.keep_answer) {
      ctx.answer = tr->final_answer();
    }
    settle(p.ok, tr->relayed_tokens());
    if (!co_await ex.end_stream()) ctx.rec.client_cancelled = true;
  }

  // What a request got from a backend's breakers before going there.
  struct Passes {
    upstream::Breaker::Pass backend{true, false, 0}, provider{true, false, 0};
  };

  // One upstream exchange on one backend, with its bookkeeping (in flight, balancer,
  // breakers, health, canary judge, metrics). Returns the failure when nothing reached the
  // client and it was not answered; nullopt when the exchange concluded.
  awaitable<std::optional<Failure>> attempt(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                            const RouteRuntime& owner, const RouteRuntime& set, int member,
                                            BackendRuntime& be, Passes passes, bool judged, bool is_canary) {
    const auto t0 = Clock::now();
    ctx.rec.model = be.record_model;
    ctx.rec.provider = config::to_string(be.cfg.provider);
    ctx.rec.backend = be.record_name;
    ctx.rec.upstream_status = 0;
    ctx.rec.ttft_ms = -1;
    be.adaptive.started(be.in_flight.fetch_add(1, std::memory_order_relaxed) + 1);
    // Ollama loads the model again when these options change: which ones it gets is noted,
    // and a change is judged by the first token's time (a reload seen, or not).
    const std::uint64_t load_sig =
        be.wire == config::Provider::ollama ? upstream::load_signature(upstream::load_values(creq.body)) : 0;
    const auto options_changed = load_sig ? be.model_load.classify(load_sig) : upstream::ModelLoad::Sent::none;
    set.balancer->started(member);
    if (metrics_) metrics_->upstream_started(be.metrics_backend);
    // Settled however the exchange ends; when it ends by an exception (the request torn
    // down), nothing is held against the backend.
    struct Settle {
      WorkerHandler& h;
      Context& ctx;
      const RouteRuntime& owner;
      const RouteRuntime& set;
      int member;
      BackendRuntime& be;
      Passes passes;
      bool judged, is_canary;
      Clock::time_point t0;
      upstream::ModelLoad::Sent options_changed = upstream::ModelLoad::Sent::none;
      std::uint64_t load_sig = 0;
      bool known = false, failed = false, client_left = true, timed_out = false;

      void outcome(const std::optional<Failure>& f) {
        known = true;
        // A client that left, or a gateway out of fds, says nothing about the backend; nor
        // does a batched call's outcome but once (its first request's).
        // (Ended from outside, by an operator's cancel or the drain's cut: no verdict either.)
        const Reason why = f ? f->reason : ctx.rec.reason;
        client_left = ctx.batch_follower || why == Reason::client_closed || why == Reason::cancelled ||
                      why == Reason::shutting_down || (f && f->reason == Reason::local_resources);
        failed = f ? retryable(*f) || f->reason == Reason::upstream_timeout : upstream_failed(ctx.rec);
        timed_out = f && (f->reason == Reason::upstream_timeout || f->reason == Reason::first_token_timeout);
      }
      ~Settle() {
        const auto now = Clock::now();
        // Latency as this backend served it: time to first token (whole answer when not streamed).
        const double since_t0 = ms_since(t0, now);
        double latency = since_t0;
        if (ctx.rec.ttft_ms >= 0) latency = ctx.rec.ttft_ms - ms_since(ctx.start, t0);
        be.in_flight.fetch_sub(1, std::memory_order_relaxed);
        be.model_load.answered(options_changed, load_sig, known && !failed && !client_left,
                               ctx.rec.stream && ctx.rec.ttft_ms >= 0 ? latency : -1);
        set.balancer->finished(member, !known || failed ? -1 : latency);
        if (!known || client_left) {
          // No verdict on the backend; a half-open probe slot goes back.
          if (be.breaker) be.breaker->release(passes.backend);
          if (be.provider->breaker) be.provider->breaker->release(passes.provider);
        } else {
          const double l = failed ? -1 : latency;
          // (A timeout is a sample too: at least as slow as the time it waited.)
          be.adaptive.observe(timed_out ? since_t0 : l);
          if (be.breaker) be.breaker->record(now, failed, l, passes.backend);
          if (be.provider->breaker) be.provider->breaker->record(now, failed, l, passes.provider);
          if (be.health.request_result(now, failed)) {
            std::string fields = R"("backend":)";
            append_json_string(fields, be.name);
            fields += R"(,"detail":"consecutive failed requests")";
            h.g_.router->notify("backend.ejected", std::move(fields));
          }
          if (judged && owner.judge->record(now, is_canary, failed, l)) h.rolled_back(owner);
        }
        if (h.metrics_) h.metrics_->upstream_finished(be.metrics_backend, known && failed, since_t0 / 1000.0);
      }
    } settle{*this, ctx, owner, set, member, be, passes, judged, is_canary, t0, options_changed, load_sig};
    auto f = co_await relay(ex, ctx, creq, be, *set.route);
    settle.outcome(f);
    co_return f;
  }

  void rolled_back(const RouteRuntime& rr) {
    rr.stats->rollbacks.fetch_add(1, std::memory_order_relaxed);
    std::string fields = R"("route":)";
    append_json_string(fields, rr.route->alias);
    fields += R"(,"canary":)";
    append_json_string(fields, rr.canary ? rr.canary->route->alias : std::string_view());
    fields += R"(,"detail":)";
    append_json_string(fields, rr.judge->reason());
    g_.router->notify("canary.rolled_back", std::move(fields));
  }

  // The failure of a request ended from outside (an operator's cancel), if it was.
  static std::optional<Failure> stopped_from_outside(const Context& ctx) {
    if (!ctx.live || ctx.live->stop == Reason::ok) return std::nullopt;
    Failure f;
    f.reason = ctx.live->stop;
    f.message = stop_message(f.reason);
    return f;
  }

  static awaitable<std::optional<Failure>> failed_now(Failure f) { co_return f; }

  // Phases 7..13: the upstream call and the relay. Not a coroutine: it builds the upstream
  // request and returns the exchange that sends it (streamed or whole), which holds the
  // request in its own frame; a stream's stack has one frame fewer.
  awaitable<std::optional<Failure>> relay(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                          const BackendRuntime& be, const config::Route& route) {
    // Upstream request: the adapter rewrites the body (or the codec, for a backend that
    // serves the client's API itself); credentials and trace go in headers.
    // Cancelled by an operator while it waited (queued, in the filters, between attempts).
    if (auto stopped = stopped_from_outside(ctx)) return failed_now(std::move(*stopped));
    const bool native = ctx.codec->native_on(be.cfg);
    // Answered in the client's own API: nothing in the internal form to share (the
    // requests that joined generate their own at once).
    if (native && ctx.shares) ctx.shares->fail(Reason::upstream_error, "answered natively: not shared");
    auto call = native ? ctx.codec->native_call(creq, be.cfg) : llm::build_call(be.wire, creq, be.cfg);
    http::ClientRequest ureq;
    ureq.target = std::move(call.target);
    ureq.body = std::move(call.body);
    ureq.headers.insert(ureq.headers.end(), be.credentials.begin(), be.credentials.end());
    ureq.headers.emplace_back("traceparent", next_traceparent(ex.request().header("traceparent")));
    ureq.headers.emplace_back("X-Request-Id", ctx.request_id);

    const auto deadline = ctx.start + cfg_.timeouts.total;
    if (creq.stream) return stream_exchange(ex, ctx, creq, be, native, std::move(ureq), deadline);
    return whole_exchange(ex, ctx, creq, be, route, native, std::move(ureq), deadline);
  }

  // The non-streamed exchange.
  awaitable<std::optional<Failure>> whole_exchange(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                                   const BackendRuntime& be, const config::Route& route, bool native,
                                                   http::ClientRequest ureq, Clock::time_point deadline) {
    const auto& to = cfg_.timeouts;
    // Non-streaming: the answer arrives whole, so only the total deadline bounds it. A
    // watch on the client connection aborts the upstream exchange if the client leaves
    // (measured: a coroutine race here cost about 11,000 instructions per request).
    std::variant<std::monostate, http::ClientError, ErrorAnswer, std::string> outcome;
    bool batched = false;
    ctx.batch_follower = false;
    if (creq.task == llm::Task::embed && route.embedding_batch && !native && batcher_) {
      // Micro-batched with other embeddings requests to this backend (embed_batch.hpp);
      // sent alone when the batch's call failed in a way one request may have caused.
      http::HeaderList headers = ureq.headers;
      auto got = co_await batcher_->submit(be, *route.embedding_batch, creq, std::move(headers), deadline, to.connect,
                                           cfg_.max_upstream_response_bytes);
      if (!got.alone) {
        batched = true;
        ctx.batch_follower = got.follower;
        if (got.error) {
          outcome = std::move(*got.error);
        } else {
          ctx.rec.upstream_status = got.status;
          if (got.status >= 200 && got.status <= 299) outcome = std::move(got.body);
          else outcome = ErrorAnswer{got.status, std::move(got.body), std::move(got.retry_after)};
        }
      }
    }
    if (!batched) {
      http::AbortHandle abort;
      // (Unless others share the generation: then it is read whole for them.)
      ex.watch_client([&abort, shares = ctx.shares] {
        if (!shares || !shares->others_reading()) abort.abort();
      });
      struct Unwatch {  // also on an exception: the watch and the live list refer to `abort`
        http::Exchange& ex;
        LiveRequest* live;
        ~Unwatch() {
          ex.unwatch_client();
          if (live) live->abort = nullptr;
        }
      } unwatch{ex, ctx.live};
      if (ctx.live) ctx.live->abort = &abort;  // an operator's cancel ends the exchange
      auto sent = co_await client_->send(be.target, ureq, to.connect, left_until(deadline), &abort);
      if (auto* err = std::get_if<http::ClientError>(&sent)) {
        outcome = std::move(*err);
      } else {
        auto& resp = *std::get<std::unique_ptr<http::ClientResponse>>(sent);
        abort.bind([&resp] { resp.abort(); });
        ctx.rec.upstream_status = resp.status();
        if (resp.status() < 200 || resp.status() > 299) {
          outcome = co_await read_error_answer(resp);
        } else {
          auto body = co_await resp.read_all(cfg_.max_upstream_response_bytes, left_until(deadline));
          if (auto* err = std::get_if<http::ClientError>(&body)) {
            resp.abort();
            outcome = std::move(*err);
          } else {
            outcome = std::move(std::get<std::string>(body));
          }
        }
        abort.unbind();
      }
    }
    ex.unwatch_client();  // (idempotent) before replying
    if (auto stopped = stopped_from_outside(ctx)) co_return stopped;
    if (ex.client_gone() && ctx.shares && !native && std::holds_alternative<std::string>(outcome)) {
      // The client left; the requests sharing the generation get the answer.
      if (auto done = llm::read_answer(be.wire, std::move(std::get<std::string>(outcome)), creq, ctx.request_id)) {
        ctx.rec.prompt_tokens = settled_prompt(done->usage.prompt_tokens, creq, ctx, ex.request().body().size());
        ctx.rec.completion_tokens = std::max<std::int64_t>(done->usage.completion_tokens, 0);
        ctx.completion = std::move(done->body);
      }
      ctx.rec.client_cancelled = true;
      ctx.rec.status = http_status(Reason::client_closed);
      ctx.rec.reason = Reason::client_closed;
      co_return std::nullopt;
    }
    if (ex.client_gone() || outcome.index() == 0) {
      outcome = http::ClientError{http::ClientErrc::cancelled, "client closed the connection"};
    }
    if (auto* err = std::get_if<http::ClientError>(&outcome)) {
      auto [reason, message] = classify(*err, false);
      if (reason == Reason::client_closed) {
        ctx.rec.client_cancelled = true;
        co_await local_reply(ex, ctx, reason, std::move(message));
        co_return std::nullopt;
      }
      co_return Failure{reason, std::move(message), std::nullopt};
    }
    if (auto* answer = std::get_if<ErrorAnswer>(&outcome)) {
      co_return Failure{Reason::upstream_error, "upstream answered HTTP " + std::to_string(answer->status),
                        std::move(*answer)};
    }
    co_return co_await reply_whole(ex, ctx, creq, be.wire, native, std::get<std::string>(outcome));
  }

  // How a failed upstream exchange is reported (before any byte reached the client).
  static std::pair<Reason, std::string> classify(const http::ClientError& err, bool awaiting_first_token) {
    switch (err.kind) {
      case http::ClientErrc::cancelled:
        return {Reason::client_closed, "client closed the connection"};
      case http::ClientErrc::connect_failed:
        return {Reason::upstream_unreachable, "upstream unreachable: " + err.message};
      case http::ClientErrc::local_resources:
        // This process, not the upstream: no verdict on the backend (see Settle).
        return {Reason::local_resources, "the gateway could not open a connection: " + err.message};
      case http::ClientErrc::timeout:
        return {awaiting_first_token ? Reason::first_token_timeout : Reason::upstream_timeout,
                "upstream did not answer in time"};
      default:
        return {Reason::upstream_error, "upstream failed: " + err.message};
    }
  }

  // The body of a non-2xx upstream answer, bounded in size and time.
  static awaitable<ErrorAnswer> read_error_answer(http::ClientResponse& resp) {
    ErrorAnswer a;
    a.status = resp.status();
    a.retry_after = std::string(resp.header("retry-after"));
    auto body = co_await resp.read_all(64 * 1024, Ms(5000));
    if (auto* text = std::get_if<std::string>(&body)) a.body = std::move(*text);
    co_return a;
  }

  // A non-2xx upstream answer, before anything reached the client. Client errors that an
  // OpenAI-compatible upstream found in a valid request pass through unchanged, so SDKs see
  // the provider's own message; the rest is the gateway's problem to report (502).
  awaitable<void> reply_upstream_error(http::Exchange& ex, Context& ctx, ErrorAnswer& a, config::Provider wire) {
    const int st = a.status;
    const bool pass = (st == 400 || st == 413 || st == 422 || st == 429) &&
                      (wire == config::Provider::openai || wire == config::Provider::anthropic) &&
                      !a.body.empty() && a.body.front() == '{';
    if (pass) {
      ctx.rec.status = st;
      ctx.rec.reason = Reason::upstream_error;
      ctx.rec.error = "upstream answered " + std::to_string(st);
      // In the client's dialect, keeping the provider's message.
      std::string body = ctx.codec->upstream_error(st, llm::read_error(wire, std::move(a.body)));
      http::Response r = json_reply(st, std::move(body), ctx);
      if (!a.retry_after.empty()) r.headers.emplace_back("Retry-After", a.retry_after);
      co_await ex.reply(std::move(r));
      co_return;
    }
    // Built in a named local: GCC 12 destroys a temporary made by a conditional inside a
    // co_await expression twice.
    std::string message = "upstream answered HTTP " + std::to_string(st);
    if (auto said = api_error_message(a.body); !said.empty()) message += ": " + said;
    co_await local_reply(ex, ctx, Reason::upstream_error, std::move(message));
  }

  // The message of a structured API error ({"error":{"message":...}} from OpenAI-compatible
  // servers and Anthropic, {"error":"..."} from Ollama), cut to 300 bytes; empty for
  // anything else. An upstream's raw bytes (a stack trace, an HTML page, an internal host
  // name) never reach a client.
  static std::string api_error_message(std::string_view body) {
    if (body.empty() || body.front() != '{') return {};
    boost::system::error_code ec;
    auto v = boost::json::parse(body, ec);
    if (ec || !v.is_object()) return {};
    const auto* e = v.get_object().if_contains("error");
    if (!e) return {};
    const boost::json::string* m = nullptr;
    if (e->is_string()) m = &e->get_string();
    else if (e->is_object()) {
      if (const auto* mm = e->get_object().if_contains("message"); mm && mm->is_string()) m = &mm->get_string();
    }
    return m ? cut_text(std::string_view(m->data(), m->size()), 300) : std::string();
  }

  awaitable<std::optional<Failure>> reply_whole(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                                 config::Provider wire, bool native, std::string& text) {
    auto done = native ? ctx.codec->native_answer(std::move(text), creq)
                       : llm::read_answer(wire, std::move(text), creq, ctx.request_id);
    if (!done) co_return Failure{Reason::upstream_bad_response, "upstream sent a body that is not a completion", {}};
    const double gen_ms = ms_since(ctx.start);
    // Settlement's rule (settled_prompt): an invalid completion count falls back to the
    // count of the completion text the client receives.
    ctx.rec.prompt_tokens = settled_prompt(done->usage.prompt_tokens, creq, ctx, ex.request().body().size());
    ctx.rec.completion_tokens =
        done->usage.completion_tokens >= 0
            ? done->usage.completion_tokens
            : static_cast<std::int64_t>(g_.tokens.count(llm::completion_output_text(done->body), ctx.encoding));
    if (ctx.rec.completion_tokens > 0 && gen_ms > 0) {
      ctx.rec.tokens_per_s = ctx.rec.completion_tokens * 1000.0 / gen_ms;
    }
    ctx.rec.status = 200;
    if (ctx.keep_completion && !native) ctx.completion = done->body;
    std::string body = native ? std::move(done->body) : ctx.codec->answer(*done, creq, ctx.request_id);
    if (ctx.keep_answer) ctx.answer = body;
    answered(ctx);
    http::Response r = json_reply(200, std::move(body), ctx);
    if (!co_await ex.reply(std::move(r))) ctx.rec.client_cancelled = true;
    co_return std::nullopt;
  }

  // Streaming, as one loop: the upstream is read only when the client took the frames of
  // the last read, so a slow client holds back the upstream (TCP back-pressure reaches the
  // model server) and a stream never holds more than one read's frames. The waits of the
  // loop carry the deadlines (first token, idle gap, total), the heartbeat (served while
  // the upstream is silent, see http::Quiet) and two ways out: a watch on the client
  // connection and the drain's cut both abort the upstream exchange, which ends the wait
  // at once. The response head goes out with the first frame (or the first heartbeat), so
  // a failure before that is still a plain HTTP error.
  awaitable<std::optional<Failure>> stream_exchange(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                                                     const BackendRuntime& be, bool native,
                                                     http::ClientRequest ureq, Clock::time_point deadline) {
    const auto& to = cfg_.timeouts;
    std::unique_ptr<llm::StreamTranslator> translator;
    if (native) {
      translator = ctx.codec->native_stream(creq);
    } else {
      auto chunks = llm::make_stream(be.wire, creq, ctx.request_id);
      // A filter keeps the answer (the cache): folded as its chunks go by; others share
      // the generation (coalescing): its chunks are handed to them too.
      if (ctx.keep_completion) {
        std::function<void(std::string_view)> share;
        if (ctx.shares) share = [f = ctx.shares](std::string_view frames) { f->publish(frames); };
        chunks = llm::fold_stream(std::move(chunks), &ctx.completion, cfg_.max_upstream_response_bytes, std::move(share));
      }
      translator = ctx.codec->stream(std::move(chunks), creq, ctx.request_id);
    }
    // With token quotas, the relayed output is counted with the tokenizer (what a client
    // that leaves before the usage chunk pays); otherwise content chunks approximate it.
    if (ctx.rec.reserved_tokens >= 0) translator->count_output(&g_.tokens, ctx.encoding);
    Relay relay;
    std::optional<ErrorAnswer> upstream_answer;  // a non-2xx head
    // Each attempt gets its own first-token time (a retry after a timeout starts afresh).
    const auto first_token_deadline = std::min(Clock::now() + to.first_token, deadline);

    // The first failure wins; later ones are consequences of it.
    auto fail = [&](Reason r, std::string message) {
      if (relay.reason != Reason::ok) return;
      relay.reason = r;
      relay.error = std::move(message);
    };

    http::AbortHandle abort;
    LiveRequest& live = *ctx.live;
    struct Unlist {  // also on an exception: the worker's list refers to `abort`
      LiveRequest& s;
      http::Exchange& ex;
      telemetry::Metrics::Worker* m;
      ~Unlist() {
        ex.unwatch_client();
        if (m) m->stream_closed();
        s.stream = false;
        s.abort = nullptr;
      }
    } unlist{live, ex, metrics_};
    stream_opened(live, abort);
    // A client that leaves ends the exchange, unless others share the generation: then it
    // goes on for them (its frames written nowhere) until the last of them left too.
    bool detached = false;
    ex.watch_client([&abort, &detached, shares = ctx.shares] {
      if (shares && shares->others_reading()) detached = true;
      else abort.abort();
    });

    auto begin = [&]() -> awaitable<bool> {
      http::HeaderList h = ctx.headers;
      h.emplace_back("Cache-Control", "no-cache");
      h.emplace_back("X-Accel-Buffering", "no");
      co_return co_await ex.begin_stream(200, "text/event-stream", h);
    };
    http::Quiet quiet;
    quiet.at = Clock::now() + to.heartbeat;
    // A write to the client: the head first if it has not gone yet. A client that takes
    // nothing for timeouts.client_write is dropped; past the total deadline, only a short
    // grace is left for the last frames.
    auto write = [&](std::string_view data) -> awaitable<bool> {
      if (detached) co_return ctx.shares->others_reading();
      ex.set_write_timeout(std::min<Ms>(to.client_write, left_until(deadline) + kEndGrace));
      if ((!ex.started() && !co_await begin()) || !co_await ex.write_chunk(data)) {
        detached = ctx.shares && ctx.shares->others_reading();
        co_return detached;
      }
      quiet.at = Clock::now() + to.heartbeat;
      co_return true;
    };
    // Heartbeat: a comment line while nothing was written for timeouts.heartbeat.
    quiet.on_quiet = [&]() -> awaitable<bool> {
      if (co_await write(": keep-alive\n\n")) co_return true;
      relay.client_gone = true;
      co_return false;
    };

    auto sent = co_await client_->send(be.target, ureq, to.connect, left_until(first_token_deadline), &abort, &quiet);
    ureq = {};  // sent: its body (the prompt, maybe long) is not held while the stream lasts
    if (auto* err = std::get_if<http::ClientError>(&sent)) {
      auto [reason, message] = classify(*err, true);
      // The request's whole time ran out (not this attempt's first-token time): no retry.
      if (reason == Reason::first_token_timeout && left_until(deadline).count() == 0) reason = Reason::upstream_timeout;
      if (live.stop != Reason::ok) reason = live.stop, message = stop_message(live.stop);
      fail(reason, std::move(message));
    } else {
      auto& resp = *std::get<std::unique_ptr<http::ClientResponse>>(sent);
      abort.bind([&resp] { resp.abort(); });
      ctx.rec.upstream_status = resp.status();
      if (resp.status() < 200 || resp.status() > 299) {
        upstream_answer = co_await read_error_answer(resp);
      } else {
        co_await pump(resp, *translator, relay, live, fail, write, quiet, ctx.start, first_token_deadline, deadline);
      }
      abort.unbind();
      // The upstream exchange ends here, before the last writes to the client: its
      // connection goes back to the pool if it was read to the end, else it is closed
      // (and the upstream stops generating).
      std::get<std::unique_ptr<http::ClientResponse>>(sent).reset();
    }
    ex.unwatch_client();
    if (ex.client_gone()) relay.client_gone = true;

    // Settle what happened.
    ctx.rec.ttft_ms = relay.ttft_ms;
    // Settlement's rule (settled_prompt): the upstream's usage where valid, else counted:
    // the prompt as sent, the output as relayed. (A stream that produced nothing is charged
    // nothing unless it ended well: its prompt is not counted.)
    const auto& usage = translator->usage();
    const bool produced = translator->first_token_seen() || translator->done() || usage.completion_tokens >= 0;
    ctx.rec.prompt_tokens = produced ? settled_prompt(usage.prompt_tokens, creq, ctx, ex.request().body().size())
                            : usage.prompt_tokens >= 0 ? usage.prompt_tokens
                                                       : creq.prompt_tokens_estimate;
    ctx.rec.completion_tokens = usage.completion_tokens >= 0 ? usage.completion_tokens : translator->relayed_tokens();
    if (relay.ttft_ms >= 0 && relay.last_token_at > relay.first_token_at && ctx.rec.completion_tokens > 1) {
      ctx.rec.tokens_per_s =
          (ctx.rec.completion_tokens - 1) * 1000.0 / ms_since(relay.first_token_at, relay.last_token_at);
    }
    if (relay.client_gone) {
      // (Followers of a generation this client left get what really ended it.)
      if (ctx.shares && relay.reason != Reason::ok) ctx.shares->fail(relay.reason, relay.error);
      ctx.rec.client_cancelled = true;
      ctx.rec.status = http_status(Reason::client_closed);
      ctx.rec.reason = Reason::client_closed;
      co_return std::nullopt;
    }
    if (upstream_answer) {
      if (!ex.started()) {
        const int st = upstream_answer->status;
        co_return Failure{Reason::upstream_error, "upstream answered HTTP " + std::to_string(st),
                          std::move(*upstream_answer)};
      }
      fail(Reason::upstream_error, "upstream answered HTTP " + std::to_string(upstream_answer->status));
    }
    ex.set_write_timeout(std::min<Ms>(to.client_write, left_until(deadline) + kEndGrace));
    if (relay.reason == Reason::ok) {
      ctx.rec.status = 200;
      if (ctx.keep_answer) ctx.answer = translator->final_answer();
      if (!ex.started()) co_await begin();  // an empty but well-formed stream
      answered(ctx);  // before the end: a client that asks again at once finds it kept
      if (!co_await ex.end_stream()) ctx.rec.client_cancelled = true;
      co_return std::nullopt;
    }
    if (!ex.started()) {
      // Nothing reached the client yet: a plain HTTP error, or another backend.
      if (relay.reason != Reason::shutting_down) co_return Failure{relay.reason, std::move(relay.error), {}};
      co_await local_reply(ex, ctx, relay.reason, relay.error);
      co_return std::nullopt;
    }
    // Mid-stream failure: an error event, then a clean end.
    ctx.rec.status = 200;
    ctx.rec.reason = relay.reason;
    ctx.rec.error = relay.error;
    if (!relay.error_frame_sent) {
      std::string frame = translator->error_event(relay.reason, relay.error);
      if (frame.empty()) frame = ctx.codec->error_event(relay.reason, relay.error);
      co_await ex.write_chunk(frame);
    }
    co_await ex.end_stream();
    co_return std::nullopt;
  }

  // The stream loop's body: reads the upstream, translates, writes to the client, until
  // the upstream ends, something fails, the client leaves or the drain cuts the stream.
  template <class Fail, class Write>
  awaitable<void> pump(http::ClientResponse& resp, llm::StreamTranslator& tr, Relay& relay,
                              const LiveRequest& live, Fail& fail, Write& write, http::Quiet& quiet,
                              Clock::time_point start, Clock::time_point first_token_deadline,
                              Clock::time_point deadline) {
    std::string frames;
    // After the stream's end marker, only the body's own end is read (so the connection
    // can be pooled), for kEndGrace at most: an upstream that keeps it open, or sends
    // more, does not fail an answer that is whole.
    std::optional<Clock::time_point> end_by;
    for (;;) {
      if (tr.done()) {
        if (!end_by) end_by = std::min(Clock::now() + kEndGrace, deadline);
        if (live.stop != Reason::ok || Clock::now() >= *end_by) co_return;
      }
      if (live.stop != Reason::ok) {
        fail(live.stop, stop_message(live.stop));
        co_return;
      }
      // An upstream that never pauses still ends at the total deadline.
      if (Clock::now() >= deadline) {
        fail(Reason::upstream_timeout, "the request ran past timeouts.total");
        co_return;
      }
      const Ms timeout = end_by                  ? left_until(*end_by)
                         : tr.first_token_seen() ? std::min(cfg_.timeouts.idle, left_until(deadline))
                                                 : left_until(first_token_deadline);
      auto piece = co_await resp.read_some(timeout, &quiet);
      frames.clear();
      if (auto* err = std::get_if<http::ClientError>(&piece)) {
        if (relay.client_gone || tr.done()) co_return;  // (after the end: the answer is whole)
        if (live.stop != Reason::ok) {
          fail(live.stop, stop_message(live.stop));
        } else if (err->kind == http::ClientErrc::timeout) {
          const bool out_of_time = left_until(deadline).count() == 0;
          fail(out_of_time                ? Reason::upstream_timeout
               : !tr.first_token_seen()  ? Reason::first_token_timeout
                                         : Reason::upstream_idle_timeout,
               "upstream stream timed out");
        } else if (err->kind == http::ClientErrc::cancelled) {
          relay.client_gone = true;  // the watch aborted the exchange: the client left
        } else {
          fail(Reason::upstream_stream_failed, err->message);
        }
        co_return;
      }
      auto bytes = std::get<std::string_view>(piece);
      if (bytes.empty()) {
        if (!tr.finish(frames)) {
          fail(Reason::upstream_stream_failed, "upstream stream ended before its end marker");
        } else if (!tr.error().empty()) {
          // The upstream sent an error event; it was relayed as is.
          fail(Reason::upstream_stream_failed, tr.error());
          relay.error_frame_sent = true;
        }
        if (!frames.empty() && !co_await write(frames)) relay.client_gone = true;
        co_return;
      }
      const bool had_token = tr.first_token_seen();
      const bool ok = tr.feed(bytes, frames);
      const auto now = Clock::now();
      if (!had_token && tr.first_token_seen()) {
        relay.first_token_at = now;
        relay.ttft_ms = ms_since(start, now);
      }
      if (tr.first_token_seen()) relay.last_token_at = now;
      if (!frames.empty() && !co_await write(frames)) {
        relay.client_gone = true;
        co_return;
      }
      if (!ok) {
        // The translator already produced the error frame.
        fail(Reason::upstream_stream_failed, tr.error().empty() ? "upstream sent an invalid stream" : tr.error());
        relay.error_frame_sent = true;
        co_return;
      }
    }
  }

  // The streams open on this worker. While there are any, a timer looks four times a
  // second whether the drain's cut time (g_.cut_streams_at) has come, and ends them with a
  // `shutting_down` event: their loops may be waiting on a silent upstream.
  void stream_opened(LiveRequest& s, http::AbortHandle& abort) {
    if (metrics_) metrics_->stream_opened();
    s.stream = true;
    s.abort = &abort;
    if (!cut_timer_armed_) arm_cut_timer();
  }


  // LiveSource (live.hpp), on this worker's thread.
  void live(std::vector<LiveInfo>& out) const override {
    for (const LiveRequest* r : live_->all) {
      const Context& c = *r->ctx;
      out.push_back({live_id_text(r->id), c.request_id, {}, std::string(c.rec.key_name), std::string(c.rec.tenant),
                     c.rec.alias, c.rec.path, r->stream, c.rec.unix_ms});
    }
  }

  Cancelled cancel(std::string_view id_text) override {
    std::uint64_t id = 0;
    const auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id, 16);
    if (ec != std::errc{} || end != id_text.data() + id_text.size() || id_text.size() != 16) return Cancelled::none;
    Cancelled done = Cancelled::none;
    for (LiveRequest* r : live_->all) {
      if (r->id != id) continue;
      if (done == Cancelled::none) done = Cancelled::marked;
      if (r->stop != Reason::ok) continue;
      r->stop = Reason::cancelled;
      r->ctx->interrupt.reason = Reason::cancelled;  // (a filter that comes to wait later stops at once)
      // Requests sharing its generation (coalescing) generate their own, not fail with it.
      if (r->ctx->shares) r->ctx->shares->fail(Reason::upstream_error, "the request it shared was cancelled");
      if (r->abort) {
        r->abort->abort();  // its wait on the upstream ends at once
        done = Cancelled::ended;
      } else if (auto& in = r->ctx->interrupt; in.wake) {
        auto wake = in.wake;  // out of the gate's queue at once, answered 410 (it clears itself)
        wake();
        done = Cancelled::ended;
      }
    }
    return done;
  }

  void arm_cut_timer() {
    cut_timer_armed_ = true;
    cut_timer_.expires_after(Ms(250));
    cut_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || live_->all.empty()) {
        cut_timer_armed_ = false;
        return;
      }
      const auto cut = g_.cut_streams_at.load(std::memory_order_relaxed);
      if (cut != 0 && Clock::now().time_since_epoch().count() >= cut) {
        for (LiveRequest* s : live_->all) {
          if (!s->stream || s->stop != Reason::ok) continue;
          s->stop = Reason::shutting_down;
          s->abort->abort();  // the stream's wait on its upstream ends at once
        }
      }
      arm_cut_timer();
    });
  }

  // What the tokens charged cost at the route's price, and what the saved ones would have.
  static void estimate_money(const config::Price& p, telemetry::RequestRecord& r) {
    auto usd = [&p](std::int64_t prompt, std::int64_t completion) {
      return (static_cast<double>(std::max<std::int64_t>(prompt, 0)) * p.input +
              static_cast<double>(std::max<std::int64_t>(completion, 0)) * p.output) / 1e6;
    };
    r.cost_usd = usd(r.prompt_tokens, r.completion_tokens);
    if (r.saved_tokens > 0) {
      const std::int64_t prompt = std::clamp<std::int64_t>(r.saved_prompt_tokens, 0, r.saved_tokens);
      r.saved_usd = usd(prompt, r.saved_tokens - prompt);
    }
  }

  void record(Context& ctx) {
    ctx.rec.wall_ms = ms_since(ctx.start);
    // The record's tokens are what the request was charged (filters/rate_limits.cpp, charged_tokens): one that
    // failed, or was refused, before any output is charged nothing, and its record says so
    // (the log, the history and the limiter's ledger agree).
    if (ctx.rec.status != 200 && ctx.rec.completion_tokens <= 0 && ctx.rec.prompt_tokens > 0) ctx.rec.prompt_tokens = 0;
    if (ctx.price) estimate_money(*ctx.price, ctx.rec);
    if (metrics_) metrics_->record(ctx.rec, ctx.metrics_model, ctx.metrics_tier);
    if (g_.access_log) g_.access_log->submit(std::move(ctx.rec));
  }

  // The routing table, refreshed when a reload installed a new one.
  const std::shared_ptr<const RoutingTable>& table() {
    if (g_.router->version() != table_->version) table_ = g_.router->table();
    return table_;
  }

  const bool admin_listener_;  // serves the probes and status pages only, without a key
  Shared& g_;
  const config::Config& cfg_;
  std::shared_ptr<const RoutingTable> table_;
  keys::Registry::Reader keys_;  // the keys in force, as this worker last saw them
  TrustedProxies proxies_;  // trusted_proxies: whose X-Forwarded-For names the client
  std::uint64_t rng_ = std::random_device{}() | 1;  // canary split
  std::uint64_t live_rng_ = [] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32 | rd()) | 1;
  }();
  std::unique_ptr<http::Client> client_;
  std::unique_ptr<limits::WorkerLimiter> limiter_;
  std::shared_ptr<conversations::WorkerStore> conversations_;  // stored responses (null on the admin listener)
  std::shared_ptr<cache::WorkerCache> cache_;                  // the response cache (null on the admin listener)
  std::unique_ptr<EmbedBatcher> batcher_;                      // embeddings micro-batching (not on the admin listener)
  // The request policies, in order; each pass holds it too (a frame destroyed after the
  // handler, at a forced stop, drops its filters' states through it).
  std::shared_ptr<const filters::Chain> chain_ = std::make_shared<const filters::Chain>();
  telemetry::Metrics::Worker* metrics_ = nullptr;
  std::shared_ptr<LiveList> live_ = std::make_shared<LiveList>();  // the requests in flight
  net::steady_timer cut_timer_;
  bool cut_timer_armed_ = false;
};

}  // namespace

http::Handler make_handler(Shared& shared, net::any_io_executor ex, bool admin_listener) {
  auto h = std::make_shared<WorkerHandler>(shared, ex, admin_listener);
  if (!admin_listener && shared.live) shared.live->add(ex, h);
  return [h](http::Exchange& ex) -> awaitable<void> { return h->handle(ex); };
}

}  // namespace sluice::gateway
