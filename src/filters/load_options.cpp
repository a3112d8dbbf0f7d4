// models[].load_options (docs/tuning.md): Ollama loads the model again when a request's
// num_ctx, num_gpu or num_batch differ from those it is loaded with, and nobody on that
// server gets a token for seconds. A route's policy keeps one client's choice from stalling
// the others: `pin` replaces the client's values with the route's, `allow` refuses values
// not listed (400 option_not_allowed), `steer` lets them through and has the request go to
// a backend already loaded with them (the handler's pick, by *Request::load_signature).
// A value the client leaves out is the route's own, when it has one.
#include <algorithm>
#include <string>

#include <boost/json.hpp>

#include "config/config.hpp"
#include "filters/filter.hpp"
#include "filters/load_options.hpp"
#include "filters/registry.hpp"
#include "llm/chat.hpp"
#include "upstream/model_load.hpp"

namespace sluice::filters {

namespace {

namespace json = boost::json;

// A JSON number that is a whole number, as an integer.
bool whole(const json::value& v, std::int64_t& out) {
  if (v.is_int64()) out = v.get_int64();
  else if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) out = static_cast<std::int64_t>(v.get_uint64());
  else if (v.is_double() && v.get_double() == static_cast<double>(static_cast<std::int64_t>(v.get_double())))
    out = static_cast<std::int64_t>(v.get_double());
  else return false;
  return true;
}

std::string list(const config::LoadOptionsPolicy& p, std::string_view key) {
  std::vector<std::int64_t> ok;
  if (auto it = p.values.find(key); it != p.values.end()) ok.push_back(it->second);
  if (auto it = p.allowed.find(key); it != p.allowed.end()) ok.insert(ok.end(), it->second.begin(), it->second.end());
  std::sort(ok.begin(), ok.end());
  ok.erase(std::unique(ok.begin(), ok.end()), ok.end());
  std::string out;
  for (auto v : ok) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out.empty() ? "none: leave it out" : out;
}

class LoadOptions final : public Filter {
 public:
  std::string_view name() const override { return "load_options"; }
  unsigned phases() const override { return bit(Phase::request); }

  Next on(Phase, Request& r, void*, Stop& stop) override {
    const auto* route = r.route.config;
    if (r.kind != Kind::generate || !route || !route->load_options) return Next::go;
    if (!apply_load_options(*route, r.chat.body, stop)) return Next::stop;
    if (route->load_options->policy == config::LoadPolicy::steer && r.load_signature) {
      *r.load_signature = upstream::load_signature(upstream::load_values(r.chat.body));
    }
    return Next::go;
  }
};

}  // namespace

bool apply_load_options(const config::Route& route, json::object& body, Stop& stop) {
  const config::LoadOptionsPolicy& p = *route.load_options;
  // A client's keep_alive 0 would unload the model for everyone: under a policy the
  // route keeps the server's own.
  body.erase("keep_alive");
  json::value& ov = body["options"];
  if (!ov.is_object()) ov = json::object{};  // (parse_chat_request refused any other type)
  json::object& opts = ov.get_object();
  for (const std::string_view key : config::kLoadOptionKeys) {
    const auto own = p.values.find(key);
    const json::value* given = opts.if_contains(key);
    if (given && p.policy == config::LoadPolicy::pin) {
      opts.erase(key);
      given = nullptr;
    }
    if (given && p.policy == config::LoadPolicy::allow) {
      std::int64_t v = 0;
      bool ok = whole(*given, v) && own != p.values.end() && own->second == v;
      if (!ok && whole(*given, v)) {
        if (auto a = p.allowed.find(key); a != p.allowed.end()) ok = std::find(a->second.begin(), a->second.end(), v) != a->second.end();
      }
      if (!ok) {
        stop.reason = Reason::option_not_allowed;
        stop.param = "options." + std::string(key);
        stop.message = "options." + std::string(key) + " " + json::serialize(*given) + " is not allowed on model '" +
                       route.alias + "' (a change makes the model server load the model again, stalling every " +
                       "request on it); allowed: " + list(p, key);
        return false;
      }
    }
    if (!given && own != p.values.end()) opts[key] = own->second;
  }
  if (opts.empty()) body.erase("options");
  return true;
}

std::unique_ptr<Filter> make_load_options(const Deps&) {
  // Always in the chain: a reload may give a route its policy.
  return std::make_unique<LoadOptions>();
}

}  // namespace sluice::filters
