// GET /metrics and GET /infra: what admission is doing, read from the limiter's and the
// gate's counters at scrape time (the workers never wait for a scrape).
#include <cstdio>

#include "common/text.hpp"
#include "cache/cache.hpp"
#include "guard/guard.hpp"
#include "gateway/embed_batch.hpp"
#include "gateway/control_store.hpp"
#include "gateway/live.hpp"
#include "history/audit_table.hpp"
#include "gateway/state.hpp"
#include "events/events.hpp"
#include "history/history.hpp"
#include "store/redis.hpp"

namespace sluice::gateway {

namespace {

void metric(std::string& o, std::string_view name, std::string_view labels, double v) {
  telemetry::metric_line(o, name, labels, v);
}

void help(std::string& o, std::string_view name, std::string_view type, std::string_view text) {
  telemetry::metric_help(o, name, type, text);
}

std::string masked_redis_url(const std::string& url) {
  if (auto ep = store::parse_redis_url(url)) return store::describe(*ep);
  return "(invalid)";
}

}  // namespace

std::string render_metrics(const Shared& g) {
  std::string o;
  o.reserve(16384);
  if (g.metrics) g.metrics->render(o);
  telemetry::render_process_metrics(o, SLUICE_VERSION);
  telemetry::render_gpu_metrics(o);
  if (g.router) g.router->render_metrics(o);
  if (g.cache) g.cache->render_metrics(o);
  if (g.guards && g.guards->any()) g.guards->render_metrics(o);
  if (g.embed_batches) g.embed_batches->render(o);
  if (const auto* server = g.server.load(std::memory_order_acquire)) {
    const auto c = server->connection_stats();
    help(o, "sluice_client_connections_open", "gauge", "Client connections open (all workers).");
    metric(o, "sluice_client_connections_open", "", static_cast<double>(c.open));
    help(o, "sluice_client_connections_max", "gauge", "The cap on open client connections (limits.max_connections, or derived from the fd limit).");
    metric(o, "sluice_client_connections_max", "", static_cast<double>(g.max_connections));
    help(o, "sluice_client_connections_refused_total", "counter", "Client connections refused at the cap (503, or closed when out of file descriptors).");
    metric(o, "sluice_client_connections_refused_total", "", static_cast<double>(c.refused));
    help(o, "sluice_client_connections_evicted_total", "counter", "Idle client connections closed to make room for a new one at the cap.");
    metric(o, "sluice_client_connections_evicted_total", "", static_cast<double>(c.evicted));
    if (const auto tls = server->tls()) {
      const auto info = http::tls_info(*tls);
      help(o, "sluice_tls_handshake_failures_total", "counter",
           "Client connections to the TLS listener that did not complete a handshake (failed, timed out, a client "
           "certificate missing or refused, or plain HTTP: answered 400).");
      metric(o, "sluice_tls_handshake_failures_total", "", static_cast<double>(c.tls_handshake_failures));
      help(o, "sluice_tls_certificate_expiry_timestamp_seconds", "gauge",
           "When the listener's certificate in force expires (Unix seconds): alert well before it.");
      metric(o, "sluice_tls_certificate_expiry_timestamp_seconds", "", static_cast<double>(info.not_after));
    }
  }
  if (g.history) {
    const auto h = g.history->status();
    help(o, "sluice_history_backend_up", "gauge", "1 when the history database took the last connect or write.");
    metric(o, "sluice_history_backend_up", "backend=\"" + h.backend + "\"", h.up ? 1 : 0);
    help(o, "sluice_history_queue_rows", "gauge", "History rows waiting to be written (the batch in flight included).");
    metric(o, "sluice_history_queue_rows", "", static_cast<double>(h.queued));
    help(o, "sluice_history_rows_written_total", "counter", "History rows written.");
    metric(o, "sluice_history_rows_written_total", "", static_cast<double>(h.written));
    help(o, "sluice_history_rows_dropped_total", "counter", "History rows dropped: the queue was full, or a batch failed on every retry.");
    metric(o, "sluice_history_rows_dropped_total", "", static_cast<double>(h.dropped));
    help(o, "sluice_history_write_errors_total", "counter", "Failed history writes (the batch is retried).");
    metric(o, "sluice_history_write_errors_total", "", static_cast<double>(h.write_errors));
    help(o, "sluice_history_batches_total", "counter", "History batches written.");
    metric(o, "sluice_history_batches_total", "", static_cast<double>(h.batches));
    help(o, "sluice_history_reconnects_total", "counter", "History database connections opened after the first.");
    metric(o, "sluice_history_reconnects_total", "", static_cast<double>(h.reconnects));
  }
  if (g.events) {
    const auto e = g.events->status();
    help(o, "sluice_events_up", "gauge", "1 when a Kafka broker is reachable.");
    metric(o, "sluice_events_up", "", e.up ? 1 : 0);
    help(o, "sluice_events_queue", "gauge", "Events produced, not yet delivered or reported failed.");
    metric(o, "sluice_events_queue", "", static_cast<double>(e.queued));
    help(o, "sluice_events_produced_total", "counter", "Events handed to the Kafka producer.");
    metric(o, "sluice_events_produced_total", "", static_cast<double>(e.produced));
    help(o, "sluice_events_delivered_total", "counter", "Events acknowledged by the Kafka cluster.");
    metric(o, "sluice_events_delivered_total", "", static_cast<double>(e.delivered));
    help(o, "sluice_events_failed_total", "counter", "Events not delivered: refused at once or failed delivery (then in the fallback file).");
    metric(o, "sluice_events_failed_total", "", static_cast<double>(e.failed + e.rejected));
    help(o, "sluice_events_fallback_total", "counter", "Events written to the local fallback file.");
    metric(o, "sluice_events_fallback_total", "", static_cast<double>(e.fallback_written));
    help(o, "sluice_events_dropped_total", "counter", "Events lost: not delivered and the fallback file could not take them.");
    metric(o, "sluice_events_dropped_total", "", static_cast<double>(e.dropped));
  }
  if (g.limiter) {
    const auto t = g.limiter->totals();
    const auto st = g.limiter->status();
    help(o, "sluice_ratelimit_decisions_total", "counter", "Admission decisions of the rate limiter, by reason.");
    metric(o, "sluice_ratelimit_decisions_total", R"(decision="allowed",reason="ok")", static_cast<double>(t.allowed));
    metric(o, "sluice_ratelimit_decisions_total", R"(decision="rejected",reason="rate_limit_exceeded")",
           static_cast<double>(t.rate_limited));
    metric(o, "sluice_ratelimit_decisions_total", R"(decision="rejected",reason="token_limit_exceeded")",
           static_cast<double>(t.token_limited));
    metric(o, "sluice_ratelimit_decisions_total", R"(decision="rejected",reason="quota_exceeded")",
           static_cast<double>(t.quota_exceeded));
    metric(o, "sluice_ratelimit_decisions_total", R"(decision="rejected",reason="rate_limiter_unavailable")",
           static_cast<double>(t.unavailable));
    metric(o, "sluice_ratelimit_decisions_total", R"(decision="rejected",reason="request_too_large_for_limit")",
           static_cast<double>(t.too_large));
    help(o, "sluice_ratelimit_counted_total", "counter",
         "Decisions by where they were counted (lease: from units taken from Redis in advance).");
    metric(o, "sluice_ratelimit_counted_total", R"(backend="redis")", static_cast<double>(t.by_redis));
    metric(o, "sluice_ratelimit_counted_total", R"(backend="local")", static_cast<double>(t.by_local));
    metric(o, "sluice_ratelimit_counted_total", R"(backend="lease")", static_cast<double>(t.by_lease));
    help(o, "sluice_ratelimit_redis_errors_total", "counter", "Admission checks Redis failed (counted locally or refused instead).");
    metric(o, "sluice_ratelimit_redis_errors_total", "", static_cast<double>(t.redis_errors));
    help(o, "sluice_ratelimit_settle_errors_total", "counter", "Token settlements Redis refused, or dropped from a full queue during an outage (the reservation expires instead).");
    metric(o, "sluice_ratelimit_settle_errors_total", "", static_cast<double>(t.settle_errors));
    help(o, "sluice_ratelimit_lease_refills_total", "counter",
         "Lease requests sent to Redis in the background, before a lease ran out.");
    metric(o, "sluice_ratelimit_lease_refills_total", "", static_cast<double>(t.lease_refills));
    help(o, "sluice_ratelimit_settle_batches_total", "counter", "Settlement batches sent to Redis (one script call each).");
    metric(o, "sluice_ratelimit_settle_batches_total", "", static_cast<double>(t.settle_batches));
    help(o, "sluice_ratelimit_backend", "gauge", "1 for the limiter backend in use (configured and active).");
    std::string labels = "configured=\"" + st.configured + "\",active=\"" + st.active + "\"";
    metric(o, "sluice_ratelimit_backend", labels, 1);
    help(o, "sluice_ratelimit_backend_up", "gauge", "1 when the configured limiter backend is fully working.");
    const bool up = st.active == "memory" ? st.configured == "memory" : st.active == "redis" || st.active == "none";
    metric(o, "sluice_ratelimit_backend_up", "", up ? 1 : 0);
    if (g.limiter->wants_redis()) {
      help(o, "sluice_redis_up", "gauge", "1 when every worker's Redis connection is up.");
      metric(o, "sluice_redis_up", "", st.connections > 0 && st.connections_up == st.connections ? 1 : 0);
      help(o, "sluice_redis_connections", "gauge", "Redis connections (one per worker), by state.");
      metric(o, "sluice_redis_connections", R"(state="up")", st.connections_up);
      metric(o, "sluice_redis_connections", R"(state="down")", st.connections - st.connections_up);
      help(o, "sluice_redis_reconnects_total", "counter", "Times a Redis connection came back.");
      metric(o, "sluice_redis_reconnects_total", "", static_cast<double>(st.reconnects));
    }
    help(o, "sluice_tokens_reserved_total", "counter", "Tokens reserved at admission (prompt estimate + max output).");
    metric(o, "sluice_tokens_reserved_total", "", static_cast<double>(t.tokens_reserved));
    help(o, "sluice_tokens_charged_total", "counter", "Tokens charged at settlement.");
    metric(o, "sluice_tokens_charged_total", "", static_cast<double>(t.tokens_charged));
    help(o, "sluice_tokens_refunded_total", "counter", "Reserved tokens given back at settlement.");
    metric(o, "sluice_tokens_refunded_total", "", static_cast<double>(t.tokens_refunded));
  }
  if (g.gate) {
    const auto s = g.gate->snapshot();
    using config::Priority;
    const Priority classes[] = {Priority::vip, Priority::premium, Priority::standard};
    help(o, "sluice_queue_depth", "gauge", "Requests waiting in the concurrency gate, by class.");
    for (auto c : classes) {
      metric(o, "sluice_queue_depth", "class=\"" + std::string(config::to_string(c)) + "\"",
             s.depth[static_cast<int>(c)]);
    }
    help(o, "sluice_gate_in_flight", "gauge", "Requests holding concurrency slots.");
    metric(o, "sluice_gate_in_flight", "", s.in_flight);
    help(o, "sluice_gate_admitted_total", "counter", "Requests let through the gate, at once or after queueing.");
    metric(o, "sluice_gate_admitted_total", R"(queued="false",class="")", static_cast<double>(s.granted_now));
    for (auto c : classes) {
      metric(o, "sluice_gate_admitted_total", "queued=\"true\",class=\"" + std::string(config::to_string(c)) + "\"",
             static_cast<double>(s.granted_after_wait[static_cast<int>(c)]));
    }
    help(o, "sluice_gate_rejected_total", "counter", "Requests the gate did not let through, by reason.");
    metric(o, "sluice_gate_rejected_total", R"(reason="queue_full")", static_cast<double>(s.queue_full));
    metric(o, "sluice_gate_rejected_total", R"(reason="queue_timeout")", static_cast<double>(s.timed_out[0]));
    metric(o, "sluice_gate_rejected_total", R"(reason="client_closed")", static_cast<double>(s.cancelled));
    help(o, "sluice_gate_queued_answers_total", "counter",
         "Requests answered 202 queued with an ETA (Prefer: wait=N) instead of waiting longer than their client accepts.");
    metric(o, "sluice_gate_queued_answers_total", "", static_cast<double>(s.eta_answers));
    help(o, "sluice_gate_demoted_total", "counter", "Queued requests demoted to standard after their class's max wait.");
    for (auto c : {Priority::vip, Priority::premium}) {
      metric(o, "sluice_gate_demoted_total", "class=\"" + std::string(config::to_string(c)) + "\"",
             static_cast<double>(s.demoted[static_cast<int>(c)]));
    }
    help(o, "sluice_queue_wait_seconds", "histogram", "Time queued requests waited, by the class they left in.");
    for (auto c : classes) {
      const auto ci = static_cast<std::size_t>(c);
      const std::string cls = "class=\"" + std::string(config::to_string(c)) + "\"";
      std::uint64_t cum = 0;
      for (std::size_t b = 0; b <= limits::Gate::Snapshot::kBuckets.size(); ++b) {
        cum += s.wait_buckets[ci][b];
        char le[32];
        if (b < limits::Gate::Snapshot::kBuckets.size()) std::snprintf(le, sizeof le, "%g", limits::Gate::Snapshot::kBuckets[b]);
        else std::snprintf(le, sizeof le, "+Inf");
        metric(o, "sluice_queue_wait_seconds_bucket", cls + ",le=\"" + le + "\"", static_cast<double>(cum));
      }
      metric(o, "sluice_queue_wait_seconds_sum", cls, s.wait_sum[ci]);
      metric(o, "sluice_queue_wait_seconds_count", cls, static_cast<double>(cum));
    }
  }
  return o;
}

std::pair<bool, std::string> render_ready(const Shared& g) {
  const bool draining = g.draining.load(std::memory_order_relaxed);
  std::string limiter = "none";
  if (g.limiter && g.limiter->active()) limiter = g.limiter->status().active;
  // Degraded parts that still serve (limits counted per instance, history or events
  // queued) keep the instance ready: taking it out would not help its clients.
  const bool refusing = limiter == "refusing";
  const bool ready = !draining && !refusing;
  std::string o = "{\"status\":";
  o += ready ? "\"ready\"" : draining ? "\"draining\"" : "\"not_ready\"";
  o += ",\"checks\":{\"draining\":";
  o += draining ? "true" : "false";
  o += ",\"rate_limiter\":";
  append_json_string(o, limiter);
  o += "}}";
  return {ready, std::move(o)};
}

std::string render_backends(const Shared& g) {
  const auto now = std::chrono::steady_clock::now();
  std::string o = R"({"backends":[)";
  bool first = true;
  for (const auto& b : g.router->backends()) {
    o += first ? "{" : ",{";
    first = false;
    o += R"("name":)";
    append_json_string(o, b->name);
    o += R"(,"address":)";
    append_json_string(o, b->label);
    o += R"(,"state":)";
    append_json_string(o, b->state_word(now));
    o += b->drained.load(std::memory_order_relaxed) ? R"(,"drained":true)" : R"(,"drained":false)";
    o += R"(,"in_flight":)" + std::to_string(b->in_flight.load(std::memory_order_relaxed)) + "}";
  }
  o += R"(],"fleet":)";
  o += g.control ? "true" : "false";  // drains through the database (every instance), or this one's
  o += "}";
  return o;
}

std::string render_routes(const Shared& g) {
  const auto tab = g.router->table();
  std::vector<std::string_view> aliases;
  for (const auto& [alias, rr] : tab->routes) aliases.push_back(alias);
  std::sort(aliases.begin(), aliases.end());
  std::string o = R"({"routes":[)";
  for (std::size_t i = 0; i < aliases.size(); ++i) {
    const RouteRuntime& rr = *tab->find(aliases[i]);
    o += i ? ",{" : "{";
    o += R"("model":)";
    append_json_string(o, aliases[i]);
    o += R"(,"backends":[)";
    for (std::size_t m = 0; m < rr.members.size(); ++m) {
      if (m) o += ',';
      append_json_string(o, rr.members[m]->name);
    }
    o += R"(],"canary":)";
    if (const auto& c = rr.route->canary) {
      char buf[160];
      const double set = rr.stats->canary_weight.load(std::memory_order_relaxed);
      o += R"({"model":)";
      append_json_string(o, c->alias);
      std::snprintf(buf, sizeof buf, R"(,"weight":%g,"configured_weight":%g,"set_by_operator":%s,"active":%s})",
                    rr.stats->canary_share(*c), c->weight, set >= 0 ? "true" : "false",
                    rr.judge && !rr.judge->rolled_back() ? "true" : "false");
      o += buf;
    } else {
      o += "null";
    }
    o += "}";
  }
  o += R"(],"fleet":)";
  o += g.control ? "true" : "false";
  o += "}";
  return o;
}

std::string render_infra(const Shared& g) {
  std::string o = "{\"instance\":";
  append_json_string(o, g.instance);
  o += ",\"draining\":";
  o += g.draining.load() ? "true" : "false";
  if (const auto* server = g.server.load(std::memory_order_acquire); server && server->tls()) {
    const auto info = http::tls_info(*server->tls());
    o += ",\"tls\":{\"cert_file\":";
    append_json_string(o, info.cert_file);
    o += ",\"subject\":";
    append_json_string(o, info.subject);
    o += ",\"issuer\":";
    append_json_string(o, info.issuer);
    o += ",\"not_after\":" + std::to_string(info.not_after);
    o += ",\"client_certs\":";
    o += !info.client_certs ? "\"off\"" : info.client_cert_required ? "\"require\"" : "\"optional\"";
    o += ",\"handshake_failures\":" + std::to_string(server->connection_stats().tls_handshake_failures);
    o += "}";
  }
  if (g.metrics) {
    // Every request ends: both go back to 0 when the load stops (the soak test).
    const auto live = g.metrics->live();
    o += ",\"requests\":{\"live\":" + std::to_string(live.requests) + ",\"streams\":" + std::to_string(live.streams) + "}";
  }
  if (g.limiter) {
    const auto st = g.limiter->status();
    const auto t = g.limiter->totals();
    const auto rules = g.limiter->rules();
    const auto& rl = rules->limits();
    o += ",\"rate_limiter\":{\"configured\":";
    append_json_string(o, st.configured);
    o += ",\"active\":";
    append_json_string(o, st.active);
    o += ",\"reason\":";
    append_json_string(o, st.reason);
    o += ",\"on_redis_down\":";
    o += rl.on_redis_down == config::DownPolicy::closed ? "\"closed\"" : "\"open\"";
    o += ",\"request_limits\":" + std::to_string(rl.requests.size());
    o += ",\"token_limits\":" + std::to_string(rl.tokens.size());
    if (g.limiter->wants_redis()) {
      o += ",\"redis\":{\"url\":";
      append_json_string(o, masked_redis_url(g.cfg->redis.url));
      o += ",\"up\":";
      o += st.connections > 0 && st.connections_up == st.connections ? "true" : "false";
      o += ",\"connections\":" + std::to_string(st.connections);
      o += ",\"connections_up\":" + std::to_string(st.connections_up);
      o += ",\"reconnects\":" + std::to_string(st.reconnects);
      o += ",\"last_error\":";
      append_json_string(o, st.last_error);
      o += '}';
    }
    o += ",\"counts\":{\"allowed\":" + std::to_string(t.allowed) + ",\"rate_limited\":" + std::to_string(t.rate_limited) +
         ",\"token_limited\":" + std::to_string(t.token_limited) + ",\"quota_exceeded\":" +
         std::to_string(t.quota_exceeded) + ",\"too_large_for_limit\":" + std::to_string(t.too_large) + ",\"refused_redis_down\":" + std::to_string(t.unavailable) +
         ",\"counted_redis\":" + std::to_string(t.by_redis) + ",\"counted_lease\":" + std::to_string(t.by_lease) +
         ",\"counted_local\":" + std::to_string(t.by_local) +
         ",\"redis_errors\":" + std::to_string(t.redis_errors) + ",\"settle_errors\":" + std::to_string(t.settle_errors) +
         ",\"lease_refills\":" + std::to_string(t.lease_refills) +
         ",\"settle_batches\":" + std::to_string(t.settle_batches) + "}}";
  }
  o += ",\"history\":";
  if (g.history) {
    history::append_json(o, g.history->status());
  } else {
    o += "{\"configured\":\"none\"}";
  }
  o += ",\"events\":";
  if (g.events) {
    const auto e = g.events->status();
    o += "{\"configured\":\"kafka\",\"active\":";
    o += e.up ? "\"kafka\"" : "\"fallback_file\"";
    o += ",\"up\":";
    o += e.up ? "true" : "false";
    o += ",\"brokers\":";
    append_json_string(o, e.brokers);
    o += ",\"topic\":";
    append_json_string(o, e.topic);
    o += ",\"queued\":" + std::to_string(e.queued);
    o += ",\"counts\":{\"produced\":" + std::to_string(e.produced) + ",\"delivered\":" + std::to_string(e.delivered) +
         ",\"failed\":" + std::to_string(e.failed) + ",\"rejected\":" + std::to_string(e.rejected) +
         ",\"fallback_written\":" + std::to_string(e.fallback_written) + ",\"dropped\":" + std::to_string(e.dropped) +
         ",\"restarts\":" + std::to_string(e.restarts) + "}";
    o += ",\"fallback_file\":";
    append_json_string(o, e.fallback_file);
    o += ",\"last_error\":";
    append_json_string(o, e.last_error);
    o += '}';
  } else {
    o += "{\"configured\":\"none\"}";
  }
  if (g.access_log) {
    o += ",\"access_log\":{\"enabled\":";
    o += g.access_log->enabled() ? "true" : "false";
    o += ",\"written\":" + std::to_string(g.access_log->written()) +
         ",\"dropped\":" + std::to_string(g.access_log->dropped()) + "}";
  }
  if (g.router) {
    o += ",\"routing\":";
    g.router->render_infra(o);
  }
  if (g.keys) {
    const auto set = g.keys->current();
    o += ",\"keys\":{\"in_force\":" + std::to_string(set->size()) + ",\"version\":" +
         std::to_string(g.keys->version()) + ",\"store\":";
    o += g.control ? g.control->status_json() : "null";
    o += "}";
  }
  if (g.live) {
    o += ",\"live_registry\":{\"fleet\":";
    o += g.live->fleet() ? "true" : "false";
    if (g.live->fleet()) {
      o += ",\"redis_up\":";
      o += g.live->redis_up() ? "true" : "false";
      o += ",\"published\":" + std::to_string(g.live->published()) +
           ",\"cancels_received\":" + std::to_string(g.live->cancels_received());
    }
    o += "}";
  }
  if (g.audit) {
    o += ",\"audit\":{\"up\":";
    o += g.audit->up() ? "true" : "false";
    o += ",\"pending\":" + std::to_string(g.audit->pending()) + ",\"dropped\":" + std::to_string(g.audit->dropped()) + "}";
  }
  if (g.gate) {
    const auto s = g.gate->snapshot();
    const auto& cc = g.gate->settings();  // (a reload's)
    o += ",\"concurrency_gate\":{\"active\":";
    o += g.gate->active() ? "true" : "false";
    o += ",\"in_flight\":" + std::to_string(s.in_flight);
    o += ",\"queue_size\":" + std::to_string(cc.queue_size);
    o += ",\"queued\":{\"vip\":" + std::to_string(s.depth[2]) + ",\"premium\":" + std::to_string(s.depth[1]) +
         ",\"standard\":" + std::to_string(s.depth[0]) + "}";
    o += ",\"rejected\":{\"queue_full\":" + std::to_string(s.queue_full) + ",\"queue_timeout\":" +
         std::to_string(s.timed_out[0]) + ",\"client_closed\":" + std::to_string(s.cancelled) +
         "},\"queued_answers\":" + std::to_string(s.eta_answers) + "}";
  }
  if (g.conversations) {
    o += ",\"stored_responses\":";
    o += g.conversations->status_json();
  }
  if (g.cache) {
    o += ",\"cache\":";
    o += g.cache->status_json();
  }
  o += '}';
  return o;
}

}  // namespace sluice::gateway
