// The request path: identify, authenticate, parse and validate, route, call the upstream,
// relay (streaming or not), record. See docs/phases.md and worker.hpp.
#include "gateway/worker.hpp"

namespace sluice::gateway::worker {

WorkerHandler::WorkerHandler(Shared& g, net::any_io_executor ex, bool admin_listener)
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

awaitable<void> WorkerHandler::handle(http::Exchange& ex) {
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

awaitable<void> WorkerHandler::route(http::Exchange& ex, Context& ctx, std::string_view path, std::string_view method) {
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

awaitable<void> WorkerHandler::local_reply(http::Exchange& ex, Context& ctx, Reason reason, std::string message,
                                           std::string_view param) {
  ctx.rec.status = http_status(reason);
  ctx.rec.reason = reason;
  ctx.rec.error = recorded_text(message);
  if (reason == Reason::client_closed) co_return;  // nobody to answer
  std::string body = ctx.codec->error_body(reason, message, param);
  co_await ex.reply(json_reply(http_status(reason), std::move(body), ctx));
}

std::optional<Reason> WorkerHandler::authenticate(http::Exchange& ex, Context& ctx) {
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

awaitable<void> WorkerHandler::auth_failure(http::Exchange& ex, Context& ctx, Reason reason) {
  if (reason == Reason::missing_key) {
    co_await local_reply(ex, ctx, Reason::missing_key,
                         "no API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'");
  } else {
    co_await local_reply(ex, ctx, Reason::invalid_key, "the API key is not valid");
  }
}

awaitable<void> WorkerHandler::generate(http::Exchange& ex, Context& ctx) {
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

awaitable<void> WorkerHandler::overload_or_dispatch(http::Exchange& ex, Context& ctx, llm::ChatRequest& creq, const RouteRuntime& rr,
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

void WorkerHandler::answered(Context& ctx) noexcept {
  if (!ctx.pass) return;
  try {
    ctx.pass->answered();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice: a filter's answered hook failed: %s\n", e.what());
  } catch (...) {
  }
}

filters::Request WorkerHandler::filter_request(filters::Kind kind, http::Exchange& ex, Context& ctx, llm::ChatRequest& creq,
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

bool WorkerHandler::served_natively(const RouteRuntime& rr, const api::Codec& codec) {
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

awaitable<bool> WorkerHandler::run_phase(filters::Pass& pass, filters::Phase phase, http::Exchange& ex, Context& ctx) {
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

std::int64_t WorkerHandler::settled_prompt(std::int64_t reported, const llm::ChatRequest& creq, const Context& ctx,
                                           std::size_t body_bytes) const {
  if (reported >= 0) return reported;
  if (g_.tokens.exact(ctx.encoding) && body_bytes <= llm::kExactCountMaxBytes) {
    return llm::count_prompt_tokens(creq, g_.tokens, ctx.encoding);
  }
  return llm::prompt_token_bound(creq);
}

void WorkerHandler::record_options(const llm::ChatRequest& creq, telemetry::RequestRecord& rec) {
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

bool WorkerHandler::retryable(const Failure& f) {
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

bool WorkerHandler::upstream_failed(const telemetry::RequestRecord& r) {
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

awaitable<void> WorkerHandler::reply_failure(http::Exchange& ex, Context& ctx, Failure& f, config::Provider wire) {
  if (f.answer) {
    co_await reply_upstream_error(ex, ctx, *f.answer, wire);
  } else {
    co_await local_reply(ex, ctx, f.reason, std::move(f.message));
  }
}

awaitable<void> WorkerHandler::dispatch(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, const RouteRuntime& rr) {
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

awaitable<void> WorkerHandler::exhausted(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq, const RouteRuntime& rr,
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

double WorkerHandler::canary_draw(const Context& ctx, const llm::ChatRequest& creq, const config::CanaryConfig& c) noexcept {
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

auto WorkerHandler::attempt(http::Exchange& ex, Context& ctx, const llm::ChatRequest& creq,
                            const RouteRuntime& owner, const RouteRuntime& set, int member,
                            BackendRuntime& be, Passes passes, bool judged, bool is_canary) -> awaitable<std::optional<Failure>> {
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

void WorkerHandler::rolled_back(const RouteRuntime& rr) {
  rr.stats->rollbacks.fetch_add(1, std::memory_order_relaxed);
  std::string fields = R"("route":)";
  append_json_string(fields, rr.route->alias);
  fields += R"(,"canary":)";
  append_json_string(fields, rr.canary ? rr.canary->route->alias : std::string_view());
  fields += R"(,"detail":)";
  append_json_string(fields, rr.judge->reason());
  g_.router->notify("canary.rolled_back", std::move(fields));
}

auto WorkerHandler::stopped_from_outside(const Context& ctx) -> std::optional<Failure> {
  if (!ctx.live || ctx.live->stop == Reason::ok) return std::nullopt;
  Failure f;
  f.reason = ctx.live->stop;
  f.message = stop_message(f.reason);
  return f;
}

auto WorkerHandler::failed_now(Failure f) -> awaitable<std::optional<Failure>> { co_return f; }

void WorkerHandler::estimate_money(const config::Price& p, telemetry::RequestRecord& r) {
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

void WorkerHandler::record(Context& ctx) {
  ctx.rec.wall_ms = ms_since(ctx.start);
  // The record's tokens are what the request was charged (filters/rate_limits.cpp, charged_tokens): one that
  // failed, or was refused, before any output is charged nothing, and its record says so
  // (the log, the history and the limiter's ledger agree).
  if (ctx.rec.status != 200 && ctx.rec.completion_tokens <= 0 && ctx.rec.prompt_tokens > 0) ctx.rec.prompt_tokens = 0;
  if (ctx.price) estimate_money(*ctx.price, ctx.rec);
  if (metrics_) metrics_->record(ctx.rec, ctx.metrics_model, ctx.metrics_tier);
  if (g_.access_log) g_.access_log->submit(std::move(ctx.rec));
}

}  // namespace sluice::gateway::worker

namespace sluice::gateway {

http::Handler make_handler(Shared& shared, boost::asio::any_io_executor ex, bool admin_listener) {
  auto h = std::make_shared<worker::WorkerHandler>(shared, ex, admin_listener);
  if (!admin_listener && shared.live) shared.live->add(ex, h);
  return [h](http::Exchange& ex) -> boost::asio::awaitable<void> { return h->handle(ex); };
}

}  // namespace sluice::gateway
