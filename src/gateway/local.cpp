// What the worker serves without a model (worker.hpp): probes, status pages, CORS
// preflights, the console, the admin API, history, models, count_tokens, stored responses,
// and the list of requests in flight (LiveSource).
#include <boost/asio/co_spawn.hpp>
#include <charconv>

#include "console/console.hpp"
#include "gateway/admin.hpp"
#include "history/history.hpp"
#include "gateway/worker.hpp"

namespace sluice::gateway::worker {

awaitable<bool> WorkerHandler::serve_local(http::Exchange& ex, Context& ctx) {
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

awaitable<void> WorkerHandler::cors_preflight(http::Exchange& ex, Context& ctx) {
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

awaitable<void> WorkerHandler::history_query(http::Exchange& ex, Context& ctx, bool stats) {
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

std::string_view WorkerHandler::query_string(const http::Exchange& ex) {
  const auto target = ex.request().target();
  const auto q = target.find('?');
  return q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);
}

awaitable<void> WorkerHandler::admin(http::Exchange& ex, Context& ctx, std::string_view method, std::string_view path) {
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

const config::ApiKey& WorkerHandler::admin_listener_key() {
  static const config::ApiKey k = [] {
    config::ApiKey a;
    a.name = "admin-listener";
    a.admin = true;
    return a;
  }();
  return k;
}

awaitable<void> WorkerHandler::count_tokens(http::Exchange& ex, Context& ctx) {
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

awaitable<void> WorkerHandler::models(http::Exchange& ex, Context& ctx, std::string_view one) {
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

awaitable<void> WorkerHandler::stored_response(http::Exchange& ex, Context& ctx, std::string_view rest, std::string_view method) {
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

void WorkerHandler::live(std::vector<LiveInfo>& out) const {
  for (const LiveRequest* r : live_->all) {
    const Context& c = *r->ctx;
    out.push_back({live_id_text(r->id), c.request_id, {}, std::string(c.rec.key_name), std::string(c.rec.tenant),
                   c.rec.alias, c.rec.path, r->stream, c.rec.unix_ms});
  }
}

auto WorkerHandler::cancel(std::string_view id_text) -> Cancelled {
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

}  // namespace sluice::gateway::worker
