// The /admin/ endpoints (admin.hpp).
#include "gateway/admin.hpp"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cstdio>
#include <variant>

#include "common/clock.hpp"
#include "common/text.hpp"
#include "config/config.hpp"
#include "events/events.hpp"
#include "gateway/cache_admin.hpp"
#include "gateway/control_store.hpp"
#include "gateway/live.hpp"
#include "gateway/router.hpp"
#include "gateway/state.hpp"
#include "history/audit_table.hpp"

namespace sluice::gateway {

namespace net = boost::asio;
using net::awaitable;

namespace {

// A client's text in a message, cut short.
std::string shown(std::string_view s) {
  std::string out;
  append_clean_utf8(out, s.substr(0, 256));
  return out;
}

AdminAnswer fail(Reason r, std::string message, std::string param = {}) {
  return AdminAnswer{r, std::move(message), std::move(param), 200};
}

bool reads(std::string_view method) { return method == "GET" || method == "HEAD"; }

std::string json_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// A blocking call on the query thread; the answer comes back to the calling worker.
template <class F>
awaitable<AdminAnswer> on_query_thread(Shared& g, F& f) {
  // (A named lambda: GCC 12 mishandles capturing lambda temporaries inside co_await.)
  auto run = [&f]() -> awaitable<AdminAnswer> { co_return f(); };
  AdminAnswer a = co_await net::co_spawn(g.query_executor, run, net::use_awaitable);
  co_return a;
}

// ---- /admin/backends ---------------------------------------------------------------

struct DrainChange {
  std::string backend;
  bool drain = true;  // false: undrain
};

// POST /admin/backends/<name>/drain or /undrain: the change, or why not. A backend's name
// may hold '/' (host:port/model): the action is the last segment.
std::variant<DrainChange, AdminAnswer> drain_request(Shared& g, const AdminCall& c, std::string_view rest) {
  rest.remove_prefix(1);  // (rest starts with '/')
  const auto slash = rest.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? std::string_view{} : rest.substr(0, slash);
  const std::string_view action = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  if (name.empty() || (action != "drain" && action != "undrain")) {
    return fail(Reason::not_found, "use POST /admin/backends/<name>/drain or /undrain");
  }
  if (c.method != "POST") {
    return fail(Reason::method_not_allowed, "use POST for /admin/backends/<name>/" + std::string(action));
  }
  if (!c.by->admin) return fail(Reason::forbidden, "only a key with role admin may drain backends");
  const bool drain = action == "drain";
  const auto all = g.router->backends();
  if (drain && std::none_of(all.begin(), all.end(), [&](const auto& b) { return b->name == name; })) {
    return fail(Reason::not_found, "no backend named " + shown(name));
  }
  return DrainChange{std::string(name), drain};
}

// Through the database for the whole fleet with the key store on (control_store.hpp),
// else on this instance.
awaitable<AdminAnswer> backends(Shared& g, const AdminCall& c, std::string_view rest) {
  auto checked = drain_request(g, c, rest);
  if (auto* bad = std::get_if<AdminAnswer>(&checked)) co_return std::move(*bad);
  const auto& d = std::get<DrainChange>(checked);
  AdminAnswer answer;
  if (g.control) {
    auto write = [&] { return g.control->drain(d.backend, d.drain, *c.by); };
    answer = co_await on_query_thread(g, write);
  } else {
    auto drained = g.router->drained();
    if (d.drain) drained.insert(d.backend);
    else drained.erase(d.backend);
    g.router->set_drained(std::move(drained));
  }
  if (answer.reason == Reason::ok) {  // done, here or for the fleet
    answer.body = R"({"backend":)";
    append_json_string(answer.body, d.backend);
    answer.body += d.drain ? R"(,"drained":true})" : R"(,"drained":false})";
  }
  co_return answer;
}

// ---- /admin/routes -----------------------------------------------------------------

struct CanaryChange {
  std::string alias;
  double weight = -1;  // percent; < 0: back to the configured weight
};

// POST /admin/routes/<alias>/canary {"weight": 0..100 | null}: the change, or why not.
std::variant<CanaryChange, AdminAnswer> canary_request(const AdminCall& c, std::string_view rest) {
  constexpr std::string_view kTail = "/canary";
  if (rest.size() <= kTail.size() + 1 || !rest.ends_with(kTail)) {
    return fail(Reason::not_found, "use POST /admin/routes/<alias>/canary");
  }
  const std::string_view alias = rest.substr(1, rest.size() - 1 - kTail.size());
  if (c.method != "POST") return fail(Reason::method_not_allowed, "use POST for /admin/routes/<alias>/canary");
  if (!c.by->admin) return fail(Reason::forbidden, "only a key with role admin may set a canary's weight");
  const auto* rr = c.table->find(alias);
  if (!rr || !rr->route->canary) return fail(Reason::not_found, "no model with a canary named " + shown(alias));
  boost::system::error_code ec;
  auto v = boost::json::parse(c.body, ec);
  const auto* w = !ec && v.is_object() ? v.get_object().if_contains("weight") : nullptr;
  if (!w || v.get_object().size() != 1) {
    return fail(Reason::invalid_request, R"(expected {"weight": 0..100} or {"weight": null})", "weight");
  }
  if (w->is_null()) return CanaryChange{std::string(alias), -1};
  const double x = w->is_double() ? w->get_double() : w->is_int64() ? static_cast<double>(w->get_int64()) : -1;
  if (!(x >= 0 && x <= 100)) return fail(Reason::invalid_request, "weight: expected a number from 0 to 100, or null", "weight");
  return CanaryChange{std::string(alias), x};
}

// A canary rolled forward or back by hand (null: back to the configured weight): through
// the database for the fleet with the key store on, else on this instance.
awaitable<AdminAnswer> routes(Shared& g, const AdminCall& c, std::string_view rest) {
  auto checked = canary_request(c, rest);
  if (auto* bad = std::get_if<AdminAnswer>(&checked)) co_return std::move(*bad);
  const auto& ch = std::get<CanaryChange>(checked);
  AdminAnswer answer;
  if (g.control) {
    auto write = [&] { return g.control->set_canary(ch.alias, ch.weight, *c.by); };
    answer = co_await on_query_thread(g, write);
  } else {
    auto weights = g.router->canary_weights();
    if (ch.weight < 0) weights.erase(ch.alias);
    else weights[ch.alias] = ch.weight;
    g.router->set_canary_weights(std::move(weights));
  }
  if (answer.reason == Reason::ok) {
    answer.body = R"({"model":)";
    append_json_string(answer.body, ch.alias);
    answer.body += R"(,"canary_weight":)";
    answer.body += ch.weight < 0 ? std::string("null") : json_number(ch.weight);
    answer.body += "}";
  }
  co_return answer;
}

// ---- /admin/requests ---------------------------------------------------------------

// GET: the fleet's requests in flight (?key=, ?model=, ?stream=true|false narrow it);
// POST /admin/requests/<id>/cancel: ended wherever it runs.
awaitable<AdminAnswer> requests(Shared& g, const AdminCall& c, std::string_view rest) {
  if (rest.empty() || rest == "/") {
    if (!reads(c.method)) co_return fail(Reason::method_not_allowed, "use GET for /admin/requests");
    static constexpr std::string_view kAllowed[] = {"key", "model", "stream"};
    std::string error, key, model, stream;
    auto params = history::parse_query_params(c.query, kAllowed, error);
    if (!params) co_return fail(Reason::invalid_request, std::move(error));
    for (auto& p : *params) {
      if (p.name == "stream" && p.value != "true" && p.value != "false") {
        co_return fail(Reason::invalid_request, "stream: expected true or false, got " + shown(p.value), "stream");
      }
      (p.name == "key" ? key : p.name == "model" ? model : stream) = std::move(p.value);
    }
    LiveRequests::Listing listing = co_await g.live->list();
    AdminAnswer a;
    a.body = R"({"instance":)";
    append_json_string(a.body, g.live->instance());
    a.body += listing.fleet ? R"(,"fleet":true)" : R"(,"fleet":false)";
    if (!listing.error.empty()) {
      a.body += R"(,"error":)";
      append_json_string(a.body, "the live registry could not be read: " + listing.error);
    }
    a.body += R"(,"instances":[)";
    for (std::size_t i = 0; i < listing.instances.size(); ++i) {
      if (i) a.body += ',';
      append_json_string(a.body, listing.instances[i]);
    }
    a.body += R"(],"requests":[)";
    bool first = true;
    const auto now = unix_ms_now();
    for (const auto& r : listing.requests) {
      if ((!key.empty() && r.key != key) || (!model.empty() && r.model != model) ||
          (!stream.empty() && r.stream != (stream == "true"))) {
        continue;
      }
      if (!first) a.body += ',';
      first = false;
      LiveRequests::append_json(a.body, r);
      a.body.pop_back();
      a.body += R"(,"age_ms":)" + std::to_string(std::max<std::int64_t>(now - r.start_ms, 0)) + "}";
    }
    a.body += "]}";
    co_return a;
  }
  constexpr std::string_view kTail = "/cancel";
  if (rest.size() <= kTail.size() + 1 || !rest.ends_with(kTail)) {
    co_return fail(Reason::not_found, "use POST /admin/requests/<id>/cancel");
  }
  const std::string id(rest.substr(1, rest.size() - 1 - kTail.size()));
  if (c.method != "POST") co_return fail(Reason::method_not_allowed, "use POST for /admin/requests/<id>/cancel");
  if (!c.by->admin) co_return fail(Reason::forbidden, "only a key with role admin may cancel requests");
  AdminAnswer a;
  auto answer = [&](std::string_view instance, bool done) {
    a.body = R"({"id":)";
    append_json_string(a.body, id);
    a.body += R"(,"instance":)";
    append_json_string(a.body, instance);
    a.body += done ? R"(,"cancelled":true})" : R"(,"cancelled":"requested"})";
  };
  const Cancelled here = co_await g.live->cancel_here(id);
  if (here != Cancelled::none) {
    // Ended now, or marked: it ends when it next reaches a backend or reads from one.
    if (here == Cancelled::marked) a.status = 202;
    answer(g.live->instance(), here == Cancelled::ended);
    co_return a;
  }
  // Elsewhere in the fleet: the instance that registered it reads its cancel list.
  LiveRequests::Listing listing = co_await g.live->list();
  if (!listing.error.empty()) {
    co_return fail(Reason::store_unavailable, "not on this instance, and the live registry could not be read: " + listing.error);
  }
  const auto it = std::find_if(listing.requests.begin(), listing.requests.end(), [&](const LiveInfo& r) { return r.id == id; });
  if (it == listing.requests.end()) {
    co_return fail(Reason::not_found, "no request in flight with id " + shown(id) +
                                          (listing.fleet ? "" : " on this instance (the live registry is off)"));
  }
  if (auto err = co_await g.live->cancel_on(it->instance, id); !err.empty()) {
    co_return fail(Reason::store_unavailable, "the cancel could not be sent to " + it->instance + ": " + err);
  }
  a.status = 202;
  answer(it->instance, false);
  co_return a;
}

// ---- /admin/audit ------------------------------------------------------------------

awaitable<AdminAnswer> audit(Shared& g, const AdminCall& c) {
  if (!reads(c.method)) co_return fail(Reason::method_not_allowed, "use GET for /admin/audit");
  if (!g.audit) co_return fail(Reason::not_found, "the audit trail is in the history's database (history.backend: none)");
  std::string error;
  auto q = history::parse_audit_query(c.query, error);
  if (!q) co_return fail(Reason::invalid_request, std::move(error));
  auto read = [&] {
    auto res = g.audit->list(*q);
    if (!res.ok()) return fail(res.unavailable ? Reason::history_unavailable : Reason::invalid_request, res.error);
    AdminAnswer a;
    a.body = std::move(res.body);
    return a;
  };
  {
    AdminAnswer r = co_await on_query_thread(g, read);
    co_return r;
  }
}

// ---- reload, cache, reconcile --------------------------------------------------------

awaitable<AdminAnswer> reload(Shared& g, const AdminCall& c) {
  if (!c.by->admin) co_return fail(Reason::forbidden, "only an admin key may use /admin/reload");
  if (c.method != "POST") co_return fail(Reason::method_not_allowed, "use POST for /admin/reload");
  if (!g.reload) co_return fail(Reason::not_found, "this gateway was not started from a file");
  auto run = [&] {
    auto [ok, message] = g.reload();
    if (!ok) return fail(Reason::reload_refused, "the configuration was not reloaded: " + message);
    AdminAnswer a;
    a.body = R"({"reloaded":true,"message":)";
    append_json_string(a.body, message);
    a.body += "}";
    return a;
  };
  {
    AdminAnswer r = co_await on_query_thread(g, run);
    co_return r;
  }
}

// ---- the audit trail ---------------------------------------------------------------

// What a change did, from its path: "<thing>.<verb>" and the thing's name.
std::pair<std::string, std::string> audit_action(const AdminCall& c) {
  std::string_view rest = c.path.substr(std::string_view("/admin/").size());
  const auto slash = rest.find('/');
  const std::string_view resource = rest.substr(0, slash);
  std::string_view target = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
  static constexpr std::string_view kVerbs[] = {"drain", "undrain", "canary", "cancel", "rotate", "disable", "enable"};
  std::string verb;
  if (const auto last = target.rfind('/'); last != std::string_view::npos) {
    const auto v = target.substr(last + 1);
    if (std::find(std::begin(kVerbs), std::end(kVerbs), v) != std::end(kVerbs)) {
      verb = v;
      target = target.substr(0, last);
    }
  }
  if (verb.empty()) verb = c.method == "POST" ? "create" : c.method == "PATCH" ? "update" : c.method == "DELETE" ? "delete" : std::string(c.method);
  std::string thing = resource == "keys"       ? "key"
                      : resource == "backends" ? "backend"
                      : resource == "routes"   ? "route"
                      : resource == "requests" ? "request"
                      : resource == "reload"   ? "config"
                                               : std::string(resource);
  if (resource == "reload") verb = "reload";
  if (resource == "cache" && verb == "delete") verb = "drop";
  std::string name(target);
  if (resource == "keys" && verb == "create") {  // the key made is named in the body
    boost::system::error_code ec;
    auto v = boost::json::parse(c.body, ec);
    if (!ec && v.is_object()) {
      if (const auto* n = v.get_object().if_contains("name"); n && n->is_string()) name = n->get_string();
    }
  }
  if (resource == "cache") name = c.query;
  return {thing + "." + verb, name};
}

// {"body":<the request's JSON object, if any>,"query":"..."}: what was asked. A request's
// body holds no secret (a key's is made here, never sent: control_store.cpp refuses one).
std::string audit_detail(const AdminCall& c) {
  std::string d = "{";
  boost::system::error_code ec;
  auto v = boost::json::parse(c.body, ec);
  if (!ec && v.is_object() && c.body.size() <= 4096) {
    v.get_object().erase("secret");
    d += R"("body":)" + boost::json::serialize(v);
  }
  if (!c.query.empty()) {
    d += d.size() > 1 ? "," : "";
    d += R"("query":)";
    append_json_string(d, c.query);
  }
  return d + "}";
}

void write_audit(Shared& g, const AdminCall& c, const AdminAnswer& a) {
  history::AuditRow row;
  row.unix_ms = unix_ms_now();
  row.instance = g.instance;
  row.request_id = c.request_id;
  row.actor = c.by->name;
  std::string target;
  std::tie(row.action, target) = audit_action(c);
  append_clean_utf8(row.target, std::string_view(target).substr(0, 256));  // (a path's bytes: UTF-8 only)
  row.status = a.status;
  row.detail = audit_detail(c);
  if (g.events) {
    std::string data;
    history::append_json(data, row);
    g.events->publish("admin.audit", row.actor, data);
  }
  if (g.audit) g.audit->write(std::move(row));
}

// GET /admin/whoami: who acts, and what this instance has (for the console: which pages
// it can fill, which buttons the role may use).
std::string render_whoami(const Shared& g, const AdminCall& c) {
  std::string b = "{\"name\":";
  append_json_string(b, c.by->name);
  append_json_member(b, "role", c.by->admin ? "admin" : "viewer");
  append_json_member(b, "instance", g.instance);
  b += ",\"key_store\":";
  b += g.control ? "true" : "false";
  b += ",\"history\":";
  b += g.history ? "true" : "false";
  b += ",\"audit\":";
  b += g.audit ? "true" : "false";
  b += '}';
  return b;
}

awaitable<AdminAnswer> dispatch(Shared& g, const AdminCall& c) {
  const std::string_view path = c.path;
  auto under = [&](std::string_view base) { return path == base || path.starts_with(std::string(base) + "/"); };
  auto rest_of = [&](std::string_view base) { return path.substr(base.size()); };
  if (path == "/admin/usage/reconcile") {
    if (!reads(c.method)) co_return fail(Reason::method_not_allowed, "use GET for /admin/usage/reconcile");
    AdminAnswer r = co_await reconcile_usage(g, *c.table, c.query);
    co_return r;
  }
  if (path == "/admin/cache") {
    if (!c.by->admin) co_return fail(Reason::forbidden, "only an admin key may use /admin/cache");
    if (!c.cache) co_return fail(Reason::not_found, "the response cache is not running");
    AdminAnswer r = co_await cache_admin(*c.cache, c.method, c.query);
    co_return r;
  }
  if (path == "/admin/whoami") {
    if (!reads(c.method)) co_return fail(Reason::method_not_allowed, "use GET for /admin/whoami");
    co_return AdminAnswer{Reason::ok, render_whoami(g, c), {}, 200};
  }
  if (path == "/admin/reload") {
    AdminAnswer r = co_await reload(g, c);
    co_return r;
  }
  if (path == "/admin/audit") {
    AdminAnswer r = co_await audit(g, c);
    co_return r;
  }
  if (under("/admin/requests")) {
    AdminAnswer r = co_await requests(g, c, rest_of("/admin/requests"));
    co_return r;
  }
  if (under("/admin/routes")) {
    const auto rest = rest_of("/admin/routes");
    if (rest.empty() || rest == "/") {
      if (!reads(c.method)) co_return fail(Reason::method_not_allowed, "use GET for /admin/routes");
      co_return AdminAnswer{Reason::ok, render_routes(g), {}, 200};
    }
    AdminAnswer r = co_await routes(g, c, rest);
    co_return r;
  }
  if (under("/admin/backends")) {
    const auto rest = rest_of("/admin/backends");
    if (rest.empty() || rest == "/") {
      if (!reads(c.method)) co_return fail(Reason::method_not_allowed, "use GET for /admin/backends");
      co_return AdminAnswer{Reason::ok, render_backends(g), {}, 200};
    }
    AdminAnswer r = co_await backends(g, c, rest);
    co_return r;
  }
  if (under("/admin/keys")) {
    if (!g.control) co_return fail(Reason::not_found, "the key store is off (key_store.enabled)");
    const auto rest = rest_of("/admin/keys");
    auto run = [&] { return g.control->handle(c.method, rest, c.body, *c.keys, *c.by); };
    AdminAnswer r = co_await on_query_thread(g, run);
    co_return r;
  }
  co_return fail(Reason::not_found,
                 "no admin endpoint " + shown(path) +
                     " (/admin/whoami, /admin/keys, /admin/backends, /admin/routes, /admin/requests, /admin/audit, /admin/reload, "
                     "/admin/cache, /admin/usage/reconcile)");
}

}  // namespace

awaitable<AdminAnswer> admin_call(Shared& g, const AdminCall& c) {
  AdminAnswer a = co_await dispatch(g, c);
  // A change that was made: the audit trail (on the query thread: the database).
  if (a.reason == Reason::ok && !reads(c.method) && c.method != "OPTIONS") {
    auto run = [&] {
      write_audit(g, c, a);
      return AdminAnswer{};
    };
    AdminAnswer written = co_await on_query_thread(g, run);
    (void)written;
  }
  co_return a;
}

}  // namespace sluice::gateway
