// Configuration loading: YAML (yaml-cpp) + environment overrides, validated as a whole.
// Every problem is collected (with its key path and 1-based line) before giving up, so
// one run of `sluice serve` shows all mistakes at once.
#include "config/config.hpp"

#include "common/redis_url.hpp"

#include <arpa/inet.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <span>
#include <set>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "common/text.hpp"

namespace sluice::config {

namespace fs = std::filesystem;

namespace {

constexpr double kTwo53 = 9007199254740992.0;  // 2^53: largest exactly representable int
constexpr long long kMaxI64 = std::numeric_limits<long long>::max();

// ---------------------------------------------------------------------------------------
// Text-level validators, shared by YAML values and environment variables. Each returns ""
// when the value is fine, else the message of the error.

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string q(std::string_view s) {
  // Values echoed in messages are cut short and stripped of control characters.
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out.push_back(c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c));
  }
  if (s.size() > 80) out += "...";
  out += "'";
  return out;
}

std::string fmt_num(double v) {
  if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) < 1e16) {
    return std::to_string(static_cast<long long>(v));
  }
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string fmt_duration(Millis d) {
  const auto ms = d.count();
  if (ms != 0 && ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
  if (ms != 0 && ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms != 0 && ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

bool parse_i64(std::string_view s, long long& out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string range_msg(long long lo, long long hi, std::string_view got) {
  if (hi == kMaxI64) return "out of range: must be at least " + std::to_string(lo) + ", got " + std::string(got);
  return "out of range: must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
         ", got " + std::string(got);
}

std::string check_int(std::string_view s, long long lo, long long hi, long long& out) {
  if (!parse_i64(s, out)) return "expected an integer, got " + q(s);
  if (out < lo || out > hi) return range_msg(lo, hi, s);
  return {};
}

std::string check_double(std::string_view s, double lo, double hi, double& out) {
  std::string_view t = s;
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  if (t.empty() || ec != std::errc() || p != t.data() + t.size() || !std::isfinite(out)) {
    return "expected a number, got " + q(s);
  }
  if (out < lo || out > hi) {
    return "out of range: must be between " + fmt_num(lo) + " and " + fmt_num(hi) + ", got " +
           std::string(s);
  }
  return {};
}

std::string check_bool(std::string_view s, bool& out) {
  std::string l(s);
  for (auto& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (l == "true") { out = true; return {}; }
  if (l == "false") { out = false; return {}; }
  return "expected a boolean (true or false), got " + q(s);
}

constexpr const char* kDurationHelp =
    "expected a duration like 250ms, 5s, 10m or 1h (a bare integer means milliseconds)";

std::string check_duration(std::string_view s, Millis min, Millis& out) {
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  const std::string_view digits = s.substr(0, i), unit = s.substr(i);
  std::uint64_t n = 0;
  if (digits.empty() || !sluice::parse_u64(digits, n)) return std::string(kDurationHelp) + ", got " + q(s);
  std::uint64_t mult = 0;
  if (unit.empty() || unit == "ms") mult = 1;
  else if (unit == "s") mult = 1000;
  else if (unit == "m") mult = 60'000;
  else if (unit == "h") mult = 3'600'000;
  else return std::string(kDurationHelp) + ", got " + q(s);
  // Cap at about 100 years; more is surely a mistake and would overflow time arithmetic.
  constexpr std::uint64_t kMaxMs = 100ull * 365 * 24 * 3'600'000;
  if (n > kMaxMs / mult) return "duration too long: " + q(s);
  out = Millis(static_cast<Millis::rep>(n * mult));
  if (out < min) {
    return min.count() == 1 ? "must be greater than 0, got " + std::string(s)
                            : "must be at least " + fmt_duration(min) + ", got " + std::string(s);
  }
  return {};
}

bool has_space_or_ctl(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char ch) {
    const unsigned char c = static_cast<unsigned char>(ch);
    return c <= 0x20 || c == 0x7f;
  });
}

bool has_ctl(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char ch) {
    const unsigned char c = static_cast<unsigned char>(ch);
    return c < 0x20 || c == 0x7f;
  });
}

// Names that appear in logs and metric labels (key names, tenants, tiers).
std::string check_ident(std::string_view s) {
  if (s.empty()) return "must not be empty";
  if (s.size() > 128) return "too long (at most 128 characters)";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-' || c == ':' || c == '@' || c == '/')) {
      return "invalid character in " + q(s) + " (allowed: letters, digits and . _ - : @ /)";
    }
  }
  return {};
}

// Secrets: never echoed back in a message.
std::string check_secret(std::string_view s) {
  if (s.empty()) return "secret must not be empty";
  if (s.size() > 4096) return "secret too long (at most 4096 characters)";
  if (has_space_or_ctl(s) || std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) > 0x7e; })) {
    return "secret must be printable ASCII without spaces";
  }
  return {};
}

// An environment variable's name as errors show it. A secret pasted where a variable's
// name belongs must not reach a log or /infra (a reload's error is shown there): only a
// conventional name (upper case, digits, '_', at most 64) is echoed.
std::string env_name_for_error(std::string_view s) {
  const bool conventional = !s.empty() && s.size() <= 64 && !std::isdigit(static_cast<unsigned char>(s.front())) &&
                            std::all_of(s.begin(), s.end(), [](char c) {
                              return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
                            });
  return conventional ? std::string(s) : "(not shown: it does not look like a variable name; is it a secret?)";
}

// A client API key's secret: also long enough not to be guessed. The message names the
// key (`name`), never the secret.
std::string check_key_secret(std::string_view s, std::string_view name) {
  auto e = check_secret(s);
  if (e.empty() && s.size() < kMinKeySecretLength) {
    e = "secret too short (" + std::to_string(s.size()) + " characters; at least " +
        std::to_string(kMinKeySecretLength) + " are required)";
  }
  if (e.empty() || name.empty()) return e;
  return "key " + q(name) + ": " + e;
}

std::string check_env_name(std::string_view s) {
  const bool ok = !s.empty() && !std::isdigit(static_cast<unsigned char>(s.front())) &&
                  std::all_of(s.begin(), s.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                  });
  return ok ? std::string() : "invalid environment variable name " + env_name_for_error(s);
}

std::string check_host(std::string_view h) {
  if (h.empty()) return "host must not be empty";
  if (has_space_or_ctl(h) || h.find_first_of("/?#@[]") != std::string_view::npos) {
    return "invalid host " + q(h);
  }
  return {};
}

// The address to listen on: an IP literal (what the server binds without resolving
// anything), or "localhost", taken as 127.0.0.1. Rewrites "localhost" in place.
std::string check_listen_host(std::string& h) {
  if (h == "localhost") {
    h = "127.0.0.1";
    return {};
  }
  unsigned char addr[16];
  if (::inet_pton(AF_INET, h.c_str(), addr) == 1 || ::inet_pton(AF_INET6, h.c_str(), addr) == 1) return {};
  return "listen host must be an IP address (e.g. 127.0.0.1, 0.0.0.0 or [::]) or localhost; got " + q(h) +
         " (host names are not resolved)";
}

// "host:port" or "[v6]:port" to listen on; the host is stored without brackets.
std::string check_host_port(std::string_view s, std::string& host, std::uint16_t& port) {
  std::string_view h, p;
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return "expected host:port (IPv6 as [addr]:port), got " + q(s);
    }
    h = s.substr(1, close - 1);
    p = s.substr(close + 2);
    if (h.empty()) return "host must not be empty";
  } else {
    const auto colon = s.rfind(':');
    if (colon == std::string_view::npos) return "expected host:port, got " + q(s);
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
    if (h.find(':') != std::string_view::npos) {
      return "IPv6 addresses must be in brackets, e.g. [::1]:8080; got " + q(s);
    }
    if (auto e = check_host(h); !e.empty()) return e;
  }
  long long v = 0;
  if (auto e = check_int(p, 0, 65535, v); !e.empty()) return "port " + e;
  std::string parsed(h);
  if (auto e = check_listen_host(parsed); !e.empty()) return e;
  host = std::move(parsed);
  port = static_cast<std::uint16_t>(v);
  return {};
}

// http(s)://host[:port][/path]; fills tls, host, port, path_prefix.
std::string check_url(std::string_view s, Backend& b) {
  const auto sep = s.find("://");
  if (sep == std::string_view::npos) return "expected an http:// or https:// URL, got " + q(s);
  std::string scheme(s.substr(0, sep));
  for (auto& ch : scheme) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  bool tls = false;
  std::uint16_t port = 80;
  if (scheme == "https") { tls = true; port = 443; }
  else if (scheme != "http") return "unsupported URL scheme " + q(scheme) + " (expected http:// or https://)";
  std::string_view rest = s.substr(sep + 3);
  if (rest.find_first_of("?#") != std::string_view::npos) return "URL must not contain a query or fragment";
  if (has_space_or_ctl(rest)) return "URL must not contain spaces or control characters";
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return "URL must not contain credentials (user:password@); use api_key or api_key_env";
  }
  std::string_view host, port_text;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return "unterminated IPv6 address in URL";
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return "unexpected text after the IPv6 address in URL";
      port_text = after.substr(1);
      if (port_text.empty()) return "empty port in URL";
    }
  } else {
    const auto colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return "empty port in URL";
    }
    if (host.find_first_of("[]") != std::string_view::npos) return "invalid host in URL";
  }
  if (host.empty()) return "URL has no host";
  if (!port_text.empty()) {
    long long v = 0;
    if (auto e = check_int(port_text, 1, 65535, v); !e.empty()) return "URL port " + e;
    port = static_cast<std::uint16_t>(v);
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  b.tls = tls;
  b.host = std::string(host);
  b.port = port;
  b.path_prefix = std::string(path);
  return {};
}

// A webhook URL: like a backend URL, but a query is allowed (some receivers carry a token
// in it). Fills `b` from the part before the query.
std::string check_webhook_url(std::string_view s, Backend& b) {
  const auto qm = s.find('?');
  if (qm != std::string_view::npos) {
    const std::string_view query = s.substr(qm + 1);
    if (query.find('#') != std::string_view::npos) return "URL must not contain a fragment";
    if (has_space_or_ctl(query)) return "URL must not contain spaces or control characters";
  }
  return check_url(s.substr(0, qm), b);
}

std::string env_model_var(std::string_view alias) {
  std::string out = "SLUICE_MODEL_";
  for (char ch : alias) {
    const unsigned char c = static_cast<unsigned char>(ch);
    out.push_back(std::isalnum(c) ? static_cast<char>(std::toupper(c)) : '_');
  }
  out += "_API_KEY";
  return out;
}

std::string local_hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string host_for_display(const std::string& h) {
  return h.find(':') != std::string::npos ? "[" + h + "]" : h;
}

std::map<std::string, Range, std::less<>> default_params() {
  return {
      {"temperature", {0, 2, false}},
      {"top_p", {0, 1, false}},
      {"max_tokens", {1, 131072, true}},
      {"max_completion_tokens", {1, 131072, true}},
      {"presence_penalty", {-2, 2, false}},
      {"frequency_penalty", {-2, 2, false}},
      {"n", {1, 1, true}},
      {"seed", {-kTwo53, kTwo53, true}},
  };
}

std::map<std::string, Range, std::less<>> default_options() {
  return {
      {"num_ctx", {256, 131072, true}},
      {"num_predict", {-2, 131072, true}},
      {"num_gpu", {0, 1024, true}},
      {"num_batch", {1, 8192, true}},
      {"num_thread", {1, 1024, true}},
      {"temperature", {0, 2, false}},
      {"top_p", {0, 1, false}},
      {"top_k", {0, 1000, true}},
      {"repeat_penalty", {0, 2, false}},
      {"seed", {-kTwo53, kTwo53, true}},
      {"mirostat", {0, 2, true}},
  };
}

// ---------------------------------------------------------------------------------------
// The YAML walker.

using Fields = std::map<std::string, YAML::Node, std::less<>>;

struct Origin {
  std::string path;
  int line = 0;
};

struct KeyOrigin {
  Origin entry;
  Origin name;
  Origin secret;
  std::vector<Origin> models;
};

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

int mark_line(const YAML::Node& n) {
  const auto m = n.Mark();
  return m.line < 0 ? 0 : m.line + 1;
}

const char* kind_of(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Null: return "nothing (null)";
    default: return "nothing";
  }
}

class Loader {
 public:
  Loader(EnvLookup env, fs::path base_dir, const FileAccess& files)
      : env_(env), base_dir_(std::move(base_dir)), files_(files) {}

  LoadResult run(const YAML::Node& root);
  void error(std::string key, int line, std::string msg) {
    errors_.push_back(ConfigError{std::move(key), line, std::move(msg)});
  }
  std::vector<ConfigError> take_errors() { return std::move(errors_); }

 private:
  // Reads a map's keys: unknown and repeated keys are errors; known ones land in `out`.
  bool fields(const YAML::Node& n, const std::string& path, std::initializer_list<std::string_view> known,
              Fields& out) {
    return fields(n, path, known.begin(), known.end(), out);
  }
  bool fields(const YAML::Node& n, const std::string& path, const std::vector<std::string_view>& known,
              Fields& out) {
    return fields(n, path, known.data(), known.data() + known.size(), out);
  }
  bool fields(const YAML::Node& n, const std::string& path, const std::string_view* known_begin,
              const std::string_view* known_end, Fields& out);
  static const YAML::Node* get(const Fields& f, std::string_view name) {
    auto it = f.find(name);
    return it == f.end() ? nullptr : &it->second;
  }

  bool scalar(const YAML::Node& n, const std::string& path, const char* expected, std::string& out);
  bool report(const std::string& e, const std::string& path, const YAML::Node& n) {
    if (e.empty()) return true;
    error(path, line_of(n), e + std::string(suffix_));
    return false;
  }
  bool get_string(const YAML::Node& n, const std::string& path, std::string& out);
  template <class T>
  bool get_int(const YAML::Node& n, const std::string& path, long long lo, long long hi, T& out);
  bool get_double(const YAML::Node& n, const std::string& path, double lo, double hi, double& out);
  bool get_bool(const YAML::Node& n, const std::string& path, bool& out);
  bool get_duration(const YAML::Node& n, const std::string& path, Millis min, Millis& out);
  std::optional<std::string> getenv(const std::string& name) const {
    auto v = env_ ? env_(name.c_str()) : std::nullopt;
    if (v && v->empty()) return std::nullopt;
    return v;
  }

  void parse_limits(const YAML::Node& n, Config& c);
  void parse_timeouts(const YAML::Node& n, Config& c);
  void parse_key(const YAML::Node& n, const std::string& path, ApiKey& k, KeyOrigin& o);
  void parse_keys(const YAML::Node& n, const std::string& path, Config& c);
  void load_keys_file(const YAML::Node& n, Config& c);
  // Where a route's parts were written, for the cross checks of validate().
  struct BackendOrigin {
    std::string path;  // models[i].backends[j], or the route's alias in the short form
    int line = 0;
    bool short_form = false;
    bool valid = false;  // provider understood: takes part in the cross checks
  };
  struct RouteOrigin {
    Origin at;  // models[i].alias (else the entry)
    std::vector<BackendOrigin> backends;
    std::vector<Origin> fallbacks;
    Origin canary;   // canary.alias
    Origin breaker;  // path empty: no override
  };
  void parse_route(const YAML::Node& n, const std::string& path, const Config& c, Route& r, RouteOrigin& o);
  void parse_backend(const YAML::Node& n, const std::string& path, const Fields& f, const std::string& alias,
                     bool short_form, Backend& b, bool& provider_ok);
  void parse_breaker(const YAML::Node& n, const std::string& path, BreakerConfig& b);
  void parse_canary(const YAML::Node& n, const std::string& path, CanaryConfig& cc, Origin& alias_at);
  void parse_routing(const YAML::Node& n, Config& c);
  void name_backends(Config& c);
  void check_backends(Config& c);
  void check_route_links(const Config& c, const std::unordered_map<std::string_view, size_t>& aliases);
  void parse_sim(const YAML::Node& n, const std::string& path, SimSettings& s);
  void parse_ranges(const YAML::Node& n, const std::string& path,
                    std::map<std::string, Range, std::less<>>& out);
  void parse_redis(const YAML::Node& n, Config& c);
  void parse_rate_limits(const YAML::Node& n, Config& c);
  bool parse_limit_common(const YAML::Node& n, const std::string& path, Fields& f, LimitScope& scope,
                          LimitMatch& when, DownPolicy& down, std::int64_t& limit);
  void parse_concurrency(const YAML::Node& n, Config& c);
  void parse_admin(const YAML::Node& n, Config& c);
  void parse_history(const YAML::Node& n, Config& c);
  void parse_events(const YAML::Node& n, Config& c);
  std::string resolve_path(const std::string& p) const;
  bool get_priority(const YAML::Node& n, const std::string& path, Priority& out);
  bool get_lease(const YAML::Node& n, const std::string& path, long long max, std::int64_t& out);
  void apply_env(Config& c);
  void validate(Config& c, const YAML::Node* models_node);

  EnvLookup env_;
  fs::path base_dir_;
  const FileAccess& files_;
  std::vector<ConfigError> errors_;
  std::string_view suffix_;          // appended to messages (" (in keys.yaml)")
  std::vector<KeyOrigin> key_origins_;
  std::vector<RouteOrigin> route_origins_;
  struct LimitFilter {
    std::string path;
    int line;
    std::string field;  // key, tier, tenant, model
    std::string value;
  };
  std::vector<LimitFilter> limit_filters_;
  int reservation_ttl_line_ = 0;  // where rate_limits.reservation_ttl was set
  // yaml-cpp marks an empty value ("workers:") at the next token, often the next line;
  // such values are reported at their key's line instead. Indexed by the node's mark (its
  // position in the text; yaml-cpp gives no other handle on a node's identity), then
  // matched by identity: a scan of every empty value per lookup made a file with many
  // of them load in quadratic time (20,000 keys with empty fields: 34 s).
  std::unordered_multimap<int, std::pair<YAML::Node, int>> null_lines_;

  void note_null(const YAML::Node& value, int key_line) {
    null_lines_.emplace(value.Mark().pos, std::pair(value, key_line));
  }

  int line_of(const YAML::Node& n) const {
    if (n.IsNull()) {
      auto [first, last] = null_lines_.equal_range(n.Mark().pos);
      for (auto it = first; it != last; ++it) {
        if (it->second.first.is(n)) return it->second.second;
      }
    }
    return mark_line(n);
  }
};

bool Loader::fields(const YAML::Node& n, const std::string& path, const std::string_view* known_begin,
                    const std::string_view* known_end, Fields& out) {
  // std::span, not std::ranges::subrange: clang 14 rejects libstdc++ 12's subrange.
  const std::span<const std::string_view> known(known_begin, known_end);
  if (!n.IsMap()) {
    error(path, line_of(n), std::string("expected a map, got ") + kind_of(n) + std::string(suffix_));
    return false;
  }
  for (auto it = n.begin(); it != n.end(); ++it) {
    const YAML::Node k = it->first;  // copies: the iterator's pair is a temporary proxy
    const YAML::Node val = it->second;
    if (!k.IsScalar()) {
      error(path, line_of(k), "expected a string key, got " + std::string(kind_of(k)) + std::string(suffix_));
      continue;
    }
    const std::string name = k.Scalar();
    const std::string kpath = join(path, name);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string msg = "unknown key (expected one of:";
      bool first = true;
      for (auto kn : known) {
        msg += first ? " " : ", ";
        msg += kn;
        first = false;
      }
      error(kpath, line_of(k), msg + ")" + std::string(suffix_));
      continue;
    }
    if (out.count(name)) {
      error(kpath, line_of(k), "duplicate key (first at line " + std::to_string(line_of(out[name])) + ")" +
                                   std::string(suffix_));
      continue;
    }
    if (val.IsNull()) note_null(val, line_of(k));
    out.emplace(name, val);
  }
  return true;
}

bool Loader::scalar(const YAML::Node& n, const std::string& path, const char* expected, std::string& out) {
  if (!n.IsScalar()) {
    error(path, line_of(n), std::string("expected ") + expected + ", got " + kind_of(n) + std::string(suffix_));
    return false;
  }
  out = n.Scalar();
  return true;
}

bool Loader::get_string(const YAML::Node& n, const std::string& path, std::string& out) {
  std::string v;
  if (!scalar(n, path, "a string", v)) return false;
  out = std::move(v);
  return true;
}

template <class T>
bool Loader::get_int(const YAML::Node& n, const std::string& path, long long lo, long long hi, T& out) {
  std::string s;
  if (!scalar(n, path, "an integer", s)) return false;
  long long v = 0;
  if (!report(check_int(trim(s), lo, hi, v), path, n)) return false;
  out = static_cast<T>(v);
  return true;
}

bool Loader::get_double(const YAML::Node& n, const std::string& path, double lo, double hi, double& out) {
  std::string s;
  if (!scalar(n, path, "a number", s)) return false;
  double v = 0;
  if (!report(check_double(trim(s), lo, hi, v), path, n)) return false;
  out = v;
  return true;
}

bool Loader::get_bool(const YAML::Node& n, const std::string& path, bool& out) {
  std::string s;
  if (!scalar(n, path, "a boolean (true or false)", s)) return false;
  return report(check_bool(trim(s), out), path, n);
}

bool Loader::get_duration(const YAML::Node& n, const std::string& path, Millis min, Millis& out) {
  std::string s;
  if (!scalar(n, path, "a duration", s)) return false;
  Millis v{};
  if (!report(check_duration(trim(s), min, v), path, n)) return false;
  out = v;
  return true;
}

void Loader::parse_limits(const YAML::Node& n, Config& c) {
  Fields f;
  if (n.IsNull() || !fields(n, "limits",
                            {"max_body_bytes", "max_header_bytes", "max_upstream_response_bytes",
                             "upstream_pool_per_host", "max_connections"},
                            f)) {
    return;
  }
  if (auto v = get(f, "max_body_bytes")) get_int(*v, "limits.max_body_bytes", 1, kMaxI64, c.max_body_bytes);
  if (auto v = get(f, "max_header_bytes")) get_int(*v, "limits.max_header_bytes", 1024, kMaxI64, c.max_header_bytes);
  if (auto v = get(f, "max_upstream_response_bytes"))
    get_int(*v, "limits.max_upstream_response_bytes", 1, kMaxI64, c.max_upstream_response_bytes);
  if (auto v = get(f, "upstream_pool_per_host"))
    get_int(*v, "limits.upstream_pool_per_host", 0, 65536, c.upstream_pool_per_host);
  // 0 = auto (from the file descriptor limit at start).
  if (auto v = get(f, "max_connections")) get_int(*v, "limits.max_connections", 0, 10'000'000, c.max_connections);
}

void Loader::parse_timeouts(const YAML::Node& n, Config& c) {
  Fields f;
  if (n.IsNull() || !fields(n, "timeouts",
                            {"connect", "first_token", "idle", "total", "client_header", "keep_alive",
                             "client_first_byte", "heartbeat", "client_write", "shutdown_grace"},
                            f)) {
    return;
  }
  const Millis positive{1};
  auto& t = c.timeouts;
  if (auto v = get(f, "connect")) get_duration(*v, "timeouts.connect", positive, t.connect);
  if (auto v = get(f, "first_token")) get_duration(*v, "timeouts.first_token", positive, t.first_token);
  if (auto v = get(f, "idle")) get_duration(*v, "timeouts.idle", positive, t.idle);
  if (auto v = get(f, "total")) get_duration(*v, "timeouts.total", positive, t.total);
  if (auto v = get(f, "client_header")) get_duration(*v, "timeouts.client_header", positive, t.client_header);
  if (auto v = get(f, "keep_alive")) get_duration(*v, "timeouts.keep_alive", positive, t.keep_alive);
  if (auto v = get(f, "client_first_byte"))
    get_duration(*v, "timeouts.client_first_byte", positive, t.client_first_byte);
  if (auto v = get(f, "heartbeat")) get_duration(*v, "timeouts.heartbeat", positive, t.heartbeat);
  if (auto v = get(f, "client_write")) get_duration(*v, "timeouts.client_write", positive, t.client_write);
  if (auto v = get(f, "shutdown_grace")) get_duration(*v, "timeouts.shutdown_grace", Millis{0}, t.shutdown_grace);
}

void Loader::parse_key(const YAML::Node& n, const std::string& path, ApiKey& k, KeyOrigin& o) {
  o.entry = {path, line_of(n)};
  k.tenant = "default";
  k.models = {"*"};
  Fields f;
  if (!fields(n, path, {"name", "tenant", "tier", "models", "admin", "key", "key_env", "max_in_flight", "priority"}, f)) return;
  auto ident = [&](std::string_view field, std::string& out) {
    if (auto v = get(f, field)) {
      const std::string p = join(path, field);
      if (get_string(*v, p, out)) report(check_ident(out), p, *v);
    }
  };
  if (!get(f, "name")) error(path, line_of(n), "missing required key 'name'" + std::string(suffix_));
  ident("name", k.name);
  if (auto v = get(f, "name")) o.name = {join(path, "name"), line_of(*v)};
  ident("tenant", k.tenant);
  ident("tier", k.tier);
  if (auto v = get(f, "models")) {
    const std::string p = join(path, "models");
    if (!v->IsSequence()) {
      error(p, line_of(*v), std::string("expected a list of model aliases, got ") + kind_of(*v) + std::string(suffix_));
    } else if (v->size() == 0) {
      error(p, line_of(*v), "must list at least one model alias (or \"*\" for all)" + std::string(suffix_));
    } else {
      k.models.clear();
      for (size_t i = 0; i < v->size(); ++i) {
        const YAML::Node m = (*v)[i];
        const std::string mp = index(p, i);
        std::string alias;
        if (!get_string(m, mp, alias)) continue;
        if (alias.empty()) {
          error(mp, line_of(m), "must not be empty" + std::string(suffix_));
          continue;
        }
        k.models.push_back(alias);
        o.models.push_back({mp, line_of(m)});
      }
    }
  }
  if (auto v = get(f, "admin")) get_bool(*v, join(path, "admin"), k.admin);
  if (auto v = get(f, "max_in_flight")) get_int(*v, join(path, "max_in_flight"), 0, 1'000'000, k.max_in_flight);
  if (auto v = get(f, "priority")) {
    Priority pr{};
    if (get_priority(*v, join(path, "priority"), pr)) k.priority = pr;
  }

  const YAML::Node* lit = get(f, "key");
  const YAML::Node* var = get(f, "key_env");
  if (lit && var) {
    error(path, line_of(n), "set only one of 'key' and 'key_env'" + std::string(suffix_));
  } else if (!lit && !var) {
    error(path, line_of(n), "missing the secret: set 'key' or 'key_env'" + std::string(suffix_));
  } else if (lit) {
    const std::string p = join(path, "key");
    std::string s;
    if (get_string(*lit, p, s) && report(check_key_secret(s, k.name), p, *lit)) k.key = std::move(s);
    o.secret = {p, line_of(*lit)};
  } else {
    const std::string p = join(path, "key_env");
    std::string name;
    o.secret = {p, line_of(*var)};
    if (get_string(*var, p, name) && report(check_env_name(name), p, *var)) {
      auto val = getenv(name);
      if (!val) {
        error(p, line_of(*var), "environment variable " + env_name_for_error(name) + " is not set" + std::string(suffix_));
      } else if (auto e = check_key_secret(*val, k.name); !e.empty()) {
        error(p, line_of(*var), "environment variable " + env_name_for_error(name) + ": " + e + std::string(suffix_));
      } else {
        k.key = *val;
      }
    }
  }
}

void Loader::parse_keys(const YAML::Node& n, const std::string& path, Config& c) {
  if (n.IsNull()) return;
  if (!n.IsSequence()) {
    error(path, line_of(n), std::string("expected a list of keys, got ") + kind_of(n) + std::string(suffix_));
    return;
  }
  for (size_t i = 0; i < n.size(); ++i) {
    ApiKey k;
    KeyOrigin o;
    parse_key(n[i], index(path, i), k, o);
    c.keys.push_back(std::move(k));
    key_origins_.push_back(std::move(o));
  }
}

void Loader::load_keys_file(const YAML::Node& n, Config& c) {
  std::string rel;
  if (!get_string(n, "keys_file", rel)) return;
  if (rel.empty()) {
    error("keys_file", line_of(n), "must not be empty");
    return;
  }
  fs::path p(rel);
  if (p.is_relative()) p = base_dir_ / p;
  std::string why;
  auto text = files_.read(p.string(), why);
  if (!text) {
    error("keys_file", line_of(n), "cannot read " + p.string() + ": " + why);
    return;
  }
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    error("keys_file", e.mark.line < 0 ? 0 : e.mark.line + 1, "invalid YAML in " + p.string() + ": " + e.msg);
    return;
  }
  const std::string suffix = " (in " + p.string() + ")";
  suffix_ = suffix;
  parse_keys(root, "keys_file", c);
  suffix_ = {};
}

void Loader::parse_sim(const YAML::Node& n, const std::string& path, SimSettings& s) {
  if (n.IsNull()) return;
  Fields f;
  if (!fields(n, path,
              {"ttft", "ttft_per_prompt_token", "inter_token", "jitter", "max_in_flight", "max_waiting",
               "default_output_tokens", "max_output_tokens", "error_rate_429", "error_rate_500",
               "error_rate_503", "abort_rate", "hang_rate", "slow_first_token_rate", "slow_first_token",
               "seed"},
              f)) {
    return;
  }
  auto p = [&](std::string_view k) { return join(path, k); };
  if (auto v = get(f, "ttft")) get_duration(*v, p("ttft"), Millis{0}, s.ttft);
  if (auto v = get(f, "ttft_per_prompt_token"))
    get_double(*v, p("ttft_per_prompt_token"), 0, 1e6, s.ttft_per_prompt_token_ms);
  if (auto v = get(f, "inter_token")) get_duration(*v, p("inter_token"), Millis{0}, s.inter_token);
  if (auto v = get(f, "jitter")) get_double(*v, p("jitter"), 0, 1, s.jitter);
  if (auto v = get(f, "max_in_flight")) get_int(*v, p("max_in_flight"), 1, 1'000'000, s.max_in_flight);
  if (auto v = get(f, "max_waiting")) get_int(*v, p("max_waiting"), 0, 10'000'000, s.max_waiting);
  const bool dflt = get(f, "default_output_tokens") &&
                    get_int(*get(f, "default_output_tokens"), p("default_output_tokens"), 1, 10'000'000,
                            s.default_output_tokens);
  const bool mx = get(f, "max_output_tokens") &&
                  get_int(*get(f, "max_output_tokens"), p("max_output_tokens"), 1, 10'000'000, s.max_output_tokens);
  if (auto v = get(f, "error_rate_429")) get_double(*v, p("error_rate_429"), 0, 1, s.error_rate_429);
  if (auto v = get(f, "error_rate_500")) get_double(*v, p("error_rate_500"), 0, 1, s.error_rate_500);
  if (auto v = get(f, "error_rate_503")) get_double(*v, p("error_rate_503"), 0, 1, s.error_rate_503);
  if (auto v = get(f, "abort_rate")) get_double(*v, p("abort_rate"), 0, 1, s.abort_rate);
  if (auto v = get(f, "hang_rate")) get_double(*v, p("hang_rate"), 0, 1, s.hang_rate);
  if (auto v = get(f, "slow_first_token_rate"))
    get_double(*v, p("slow_first_token_rate"), 0, 1, s.slow_first_token_rate);
  if (auto v = get(f, "slow_first_token")) get_duration(*v, p("slow_first_token"), Millis{0}, s.slow_first_token);
  if (auto v = get(f, "seed")) {
    std::string text;
    if (scalar(*v, p("seed"), "an integer", text)) {
      std::uint64_t seed = 0;
      if (!sluice::parse_u64(trim(text), seed)) {
        error(p("seed"), line_of(*v), "expected a non-negative integer, got " + q(text));
      } else {
        s.seed = seed;
      }
    }
  }
  if ((dflt || mx) && s.default_output_tokens > s.max_output_tokens) {
    const YAML::Node* at = get(f, "default_output_tokens") ? get(f, "default_output_tokens") : get(f, "max_output_tokens");
    error(p("default_output_tokens"), line_of(*at),
          "default_output_tokens (" + std::to_string(s.default_output_tokens) + ") is greater than max_output_tokens (" +
              std::to_string(s.max_output_tokens) + ")");
  }
}

// Backend keys: the same at a route's top level (the short form: one backend) and in each
// entry of its `backends` list (the long form).
constexpr std::string_view kBackendKeys[] = {"provider", "base_url", "model",   "api_key",
                                             "api_key_env", "tls_verify", "ca_file", "sim"};

const std::vector<std::string_view>& route_keys() {
  static const std::vector<std::string_view> keys = [] {
    std::vector<std::string_view> k{"alias"};
    k.insert(k.end(), std::begin(kBackendKeys), std::end(kBackendKeys));
    k.insert(k.end(), {"max_in_flight", "backend_max_in_flight", "backends", "balance", "retries", "fallbacks",
                       "canned_reply", "canary", "breaker", "allow_params"});
    return k;
  }();
  return keys;
}

const std::vector<std::string_view>& backend_entry_keys() {
  static const std::vector<std::string_view> keys = [] {
    std::vector<std::string_view> k(std::begin(kBackendKeys), std::end(kBackendKeys));
    k.insert(k.end(), {"name", "weight", "max_in_flight", "probe"});
    return k;
  }();
  return keys;
}

// Reads the backend keys of `f` into `b`. `f` is a route's own map (short form) or one
// entry of its `backends` list (long form); `n` and `path` locate that map. The short form
// names the backend's in-flight limit backend_max_in_flight (max_in_flight is the route's)
// and honours SLUICE_MODEL_<ALIAS>_API_KEY; the long form does neither.
void Loader::parse_backend(const YAML::Node& n, const std::string& path, const Fields& f,
                           const std::string& alias, bool short_form, Backend& b, bool& provider_ok) {
  auto p = [&](std::string_view k) { return join(path, k); };
  provider_ok = false;
  if (auto v = get(f, "provider")) {
    std::string name;
    if (get_string(*v, p("provider"), name)) {
      if (name == "simulated") { b.provider = Provider::simulated; provider_ok = true; }
      else if (name == "openai") { b.provider = Provider::openai; provider_ok = true; }
      else if (name == "ollama") { b.provider = Provider::ollama; provider_ok = true; }
      else if (name == "anthropic") { b.provider = Provider::anthropic; provider_ok = true; }
      else error(p("provider"), line_of(*v), "unknown provider " + q(name) + " (expected simulated, openai, ollama or anthropic)");
    }
  } else {
    error(path, line_of(n), std::string("missing required key 'provider' (simulated, openai, ollama or anthropic)") +
                                (short_form ? ", or a 'backends' list" : ""));
  }

  if (auto v = get(f, "base_url")) {
    if (get_string(*v, p("base_url"), b.base_url)) {
      if (provider_ok && b.provider == Provider::simulated) {
        error(p("base_url"), line_of(*v), "not used by provider simulated (it runs in-process)");
      } else {
        report(check_url(b.base_url, b), p("base_url"), *v);
      }
    }
  } else if (provider_ok && b.provider != Provider::simulated) {
    error(path, line_of(n), std::string("missing required key 'base_url' for provider ") + std::string(to_string(b.provider)));
  }

  b.model = alias;
  if (auto v = get(f, "model")) {
    if (get_string(*v, p("model"), b.model)) {
      if (b.model.empty()) error(p("model"), line_of(*v), "must not be empty");
      else if (has_ctl(b.model)) error(p("model"), line_of(*v), "must not contain control characters");
    }
  }

  if (auto v = get(f, "tls_verify")) get_bool(*v, p("tls_verify"), b.tls_verify);
  const std::string_view mif_key = short_form ? "backend_max_in_flight" : "max_in_flight";
  if (auto v = get(f, mif_key)) get_int(*v, p(mif_key), 0, 1'000'000, b.max_in_flight);
  if (auto v = get(f, "ca_file")) {
    std::string file;
    if (get_string(*v, p("ca_file"), file)) {
      if (file.empty()) {
        error(p("ca_file"), line_of(*v), "must not be empty");
      } else {
        fs::path cp(file);
        if (cp.is_relative()) cp = base_dir_ / cp;
        if (!files_.is_regular_file(cp.string())) error(p("ca_file"), line_of(*v), "file not found: " + cp.string());
        else b.ca_file = cp.string();
      }
    }
  }

  if (auto v = get(f, "sim")) {
    if (provider_ok && b.provider != Provider::simulated) {
      error(p("sim"), line_of(*v), "sim settings apply only to provider simulated");
    } else {
      parse_sim(*v, p("sim"), b.sim);
    }
  }

  // Only in the long form (the short form's map does not accept these keys).
  if (auto v = get(f, "name")) {
    if (get_string(*v, p("name"), b.name)) report(check_ident(b.name), p("name"), *v);
  }
  if (auto v = get(f, "weight")) get_int(*v, p("weight"), 1, 1'000'000, b.weight);
  if (auto v = get(f, "probe")) get_bool(*v, p("probe"), b.probe);

  // Provider credential: (short form) SLUICE_MODEL_<ALIAS>_API_KEY, else api_key /
  // api_key_env, else OPENAI_API_KEY / ANTHROPIC_API_KEY for those providers.
  const YAML::Node* lit = get(f, "api_key");
  const YAML::Node* var = get(f, "api_key_env");
  if (lit && var) {
    error(path, line_of(n), "set only one of 'api_key' and 'api_key_env'");
    return;
  }
  if (short_form && !alias.empty()) {
    const std::string ovr = env_model_var(alias);
    if (auto val = getenv(ovr)) {
      if (auto e = check_secret(*val); !e.empty()) error("env " + ovr, 0, e);
      else b.api_key = *val;
      return;
    }
  }
  if (lit) {
    std::string s;
    if (get_string(*lit, p("api_key"), s) && report(check_secret(s), p("api_key"), *lit)) b.api_key = std::move(s);
  } else if (var) {
    std::string name;
    if (get_string(*var, p("api_key_env"), name) && report(check_env_name(name), p("api_key_env"), *var)) {
      auto val = getenv(name);
      if (!val) error(p("api_key_env"), line_of(*var), "environment variable " + env_name_for_error(name) + " is not set");
      else if (auto e = check_secret(*val); !e.empty())
        error(p("api_key_env"), line_of(*var), "environment variable " + env_name_for_error(name) + ": " + e);
      else b.api_key = *val;
    }
  } else if (provider_ok && (b.provider == Provider::openai || b.provider == Provider::anthropic)) {
    const char* var_name = b.provider == Provider::openai ? "OPENAI_API_KEY" : "ANTHROPIC_API_KEY";
    if (auto val = getenv(var_name)) {
      if (auto e = check_secret(*val); !e.empty()) error(std::string("env ") + var_name, 0, e);
      else b.api_key = *val;
    }
  }
}

// A breaker map: routing.breaker, routing.provider_breaker and a route's breaker. Keys not
// given keep what `b` holds.
void Loader::parse_breaker(const YAML::Node& n, const std::string& path, BreakerConfig& b) {
  Fields f;
  if (n.IsNull() ||
      !fields(n, path, {"enabled", "window", "min_requests", "error_rate", "p95_ttft", "open_for", "half_open_probes"},
              f)) {
    return;
  }
  auto p = [&](std::string_view k) { return join(path, k); };
  if (auto v = get(f, "enabled")) get_bool(*v, p("enabled"), b.enabled);
  if (auto v = get(f, "window")) get_duration(*v, p("window"), Millis{100}, b.window);
  if (auto v = get(f, "min_requests")) get_int(*v, p("min_requests"), 1, 1'000'000, b.min_requests);
  if (auto v = get(f, "error_rate")) get_double(*v, p("error_rate"), 0, 1, b.error_rate);
  if (auto v = get(f, "p95_ttft")) get_duration(*v, p("p95_ttft"), Millis{0}, b.p95_ttft);
  if (auto v = get(f, "open_for")) get_duration(*v, p("open_for"), Millis{1}, b.open_for);
  if (auto v = get(f, "half_open_probes")) get_int(*v, p("half_open_probes"), 1, 1'000'000, b.half_open_probes);
}

void Loader::parse_canary(const YAML::Node& n, const std::string& path, CanaryConfig& cc, Origin& alias_at) {
  Fields f;
  if (!fields(n, path, {"alias", "weight", "sticky", "window", "min_requests", "max_error_rate_increase", "max_ttft_ratio"},
              f)) {
    return;
  }
  auto p = [&](std::string_view k) { return join(path, k); };
  if (auto v = get(f, "alias")) {
    alias_at = {p("alias"), line_of(*v)};
    if (get_string(*v, p("alias"), cc.alias) && cc.alias.empty()) error(p("alias"), line_of(*v), "must not be empty");
  } else {
    error(path, line_of(n), "missing required key 'alias' (the route serving the canary share)");
  }
  if (auto v = get(f, "weight")) {
    get_double(*v, p("weight"), 0, 100, cc.weight);
  } else {
    error(path, line_of(n), "missing required key 'weight' (percent of requests, 0 to 100)");
  }
  if (auto v = get(f, "sticky")) {
    std::string name;
    if (get_string(*v, p("sticky"), name)) {
      if (name == "none") cc.sticky = CanarySticky::none;
      else if (name == "key") cc.sticky = CanarySticky::key;
      else if (name == "user") cc.sticky = CanarySticky::user;
      else error(p("sticky"), line_of(*v), "unknown value " + q(name) + " (expected none, key or user)");
    }
  }
  if (auto v = get(f, "window")) get_duration(*v, p("window"), Millis{1}, cc.window);
  if (auto v = get(f, "min_requests")) get_int(*v, p("min_requests"), 1, 1'000'000'000, cc.min_requests);
  if (auto v = get(f, "max_error_rate_increase")) {
    double d = 0;
    if (get_double(*v, p("max_error_rate_increase"), -1, 1, d)) {
      if (d < 0 && d != -1) {
        error(p("max_error_rate_increase"), line_of(*v),
              "out of range: must be -1 (off) or between 0 and 1, got " + fmt_num(d));
      } else {
        cc.max_error_rate_increase = d;
      }
    }
  }
  if (auto v = get(f, "max_ttft_ratio")) get_double(*v, p("max_ttft_ratio"), 0, 1e6, cc.max_ttft_ratio);
}

void Loader::parse_route(const YAML::Node& n, const std::string& path, const Config& c, Route& r, RouteOrigin& o) {
  o.at = {path, line_of(n)};
  Fields f;
  if (!fields(n, path, route_keys(), f)) return;
  auto p = [&](std::string_view k) { return join(path, k); };

  if (auto v = get(f, "alias")) {
    o.at = {p("alias"), line_of(*v)};
    if (get_string(*v, p("alias"), r.alias)) {
      if (r.alias.empty()) error(p("alias"), line_of(*v), "must not be empty");
      else if (r.alias == "*") error(p("alias"), line_of(*v), "'*' is reserved (it means all models in a key's list)");
      else if (has_space_or_ctl(r.alias)) error(p("alias"), line_of(*v), "must not contain spaces or control characters");
    }
  } else {
    error(path, line_of(n), "missing required key 'alias'");
  }
  if (auto v = get(f, "max_in_flight")) get_int(*v, p("max_in_flight"), 0, 1'000'000, r.max_in_flight);

  if (const YAML::Node* list = get(f, "backends")) {
    // Long form. The backend keys belong in the entries then.
    for (std::string_view k : kBackendKeys) {
      if (auto v = get(f, k)) {
        error(p(k), line_of(*v), "not allowed together with 'backends': set it in each backend entry instead");
      }
    }
    if (auto v = get(f, "backend_max_in_flight")) {
      error(p("backend_max_in_flight"), line_of(*v),
            "not allowed together with 'backends': set max_in_flight in each backend entry instead");
    }
    const std::string lp = p("backends");
    if (!list->IsSequence()) {
      error(lp, line_of(*list), std::string("expected a list of backends, got ") + kind_of(*list));
    } else if (list->size() == 0) {
      error(lp, line_of(*list), "must list at least one backend");
    } else if (list->size() > Route::kMaxBackends) {
      error(lp, line_of(*list), "at most " + std::to_string(Route::kMaxBackends) + " backends per route, got " +
                                    std::to_string(list->size()));
    } else {
      for (size_t i = 0; i < list->size(); ++i) {
        const YAML::Node bn = (*list)[i];
        const std::string bp = index(lp, i);
        Backend b;
        bool ok = false;
        Fields bf;
        if (fields(bn, bp, backend_entry_keys(), bf)) parse_backend(bn, bp, bf, r.alias, false, b, ok);
        r.backends.push_back(std::move(b));
        o.backends.push_back({bp, line_of(bn), false, ok});
      }
    }
  } else {
    Backend b;
    bool ok = false;
    parse_backend(n, path, f, r.alias, true, b, ok);
    r.backends.push_back(std::move(b));
    o.backends.push_back({o.at.path, o.at.line, true, ok});
  }

  if (auto v = get(f, "balance")) {
    std::string name;
    if (get_string(*v, p("balance"), name)) {
      if (name == "round_robin") r.balance = Balance::round_robin;
      else if (name == "weighted") r.balance = Balance::weighted;
      else if (name == "least_connections") r.balance = Balance::least_connections;
      else if (name == "latency") r.balance = Balance::latency;
      else error(p("balance"), line_of(*v),
                 "unknown balance " + q(name) + " (expected round_robin, weighted, least_connections or latency)");
    }
  }
  if (auto v = get(f, "retries")) get_int(*v, p("retries"), 0, 10, r.retries);
  if (auto v = get(f, "allow_params"); v && !v->IsNull()) {
    if (!v->IsSequence()) {
      error(p("allow_params"), line_of(*v), std::string("expected a list of request fields, got ") + kind_of(*v));
    } else {
      for (size_t i = 0; i < v->size(); ++i) {
        const YAML::Node a = (*v)[i];
        const std::string ap = index(p("allow_params"), i);
        std::string name;
        if (!get_string(a, ap, name)) continue;
        if (name != "service_tier" && name != "store") {
          error(ap, line_of(a), "unknown field " + q(name) + " (expected service_tier or store)");
          continue;
        }
        r.allow_params.push_back(std::move(name));
      }
    }
  }
  if (auto v = get(f, "fallbacks"); v && !v->IsNull()) {
    if (!v->IsSequence()) {
      error(p("fallbacks"), line_of(*v), std::string("expected a list of model aliases, got ") + kind_of(*v));
    } else if (v->size() > Route::kMaxFallbacks) {
      error(p("fallbacks"), line_of(*v), "at most " + std::to_string(Route::kMaxFallbacks) + " fallbacks, got " +
                                             std::to_string(v->size()));
    } else {
      for (size_t i = 0; i < v->size(); ++i) {
        const YAML::Node a = (*v)[i];
        const std::string ap = index(p("fallbacks"), i);
        std::string alias;
        if (!get_string(a, ap, alias)) continue;
        if (alias.empty()) {
          error(ap, line_of(a), "must not be empty");
          continue;
        }
        r.fallbacks.push_back(std::move(alias));
        o.fallbacks.push_back({ap, line_of(a)});
      }
    }
  }
  if (auto v = get(f, "canned_reply")) {
    std::string text;
    if (get_string(*v, p("canned_reply"), text)) {
      if (text.empty()) error(p("canned_reply"), line_of(*v), "must not be empty (omit it to answer 503)");
      else r.canned_reply = std::move(text);
    }
  }
  if (auto v = get(f, "canary")) {
    CanaryConfig cc;
    parse_canary(*v, p("canary"), cc, o.canary);
    r.canary = std::move(cc);
  }
  if (auto v = get(f, "breaker"); v && !v->IsNull()) {
    BreakerConfig b = c.routing.breaker;  // keys not given: the global breaker's
    parse_breaker(*v, p("breaker"), b);
    r.breaker = b;
    o.breaker = {p("breaker"), line_of(*v)};
  }
}

void Loader::parse_routing(const YAML::Node& n, Config& c) {
  Fields f;
  if (n.IsNull() || !fields(n, "routing", {"health", "breaker", "provider_breaker", "webhook"}, f)) return;
  auto& rs = c.routing;
  if (auto v = get(f, "health")) {
    Fields hf;
    if (!v->IsNull() && fields(*v, "routing.health",
                               {"interval", "timeout", "unhealthy_after", "healthy_after", "eject_after", "eject_for"},
                               hf)) {
      auto& h = rs.health;
      if (auto x = get(hf, "interval")) get_duration(*x, "routing.health.interval", Millis{0}, h.interval);
      if (auto x = get(hf, "timeout")) get_duration(*x, "routing.health.timeout", Millis{1}, h.timeout);
      if (auto x = get(hf, "unhealthy_after")) get_int(*x, "routing.health.unhealthy_after", 1, 1'000'000, h.unhealthy_after);
      if (auto x = get(hf, "healthy_after")) get_int(*x, "routing.health.healthy_after", 1, 1'000'000, h.healthy_after);
      if (auto x = get(hf, "eject_after")) get_int(*x, "routing.health.eject_after", 0, 1'000'000, h.eject_after);
      if (auto x = get(hf, "eject_for")) get_duration(*x, "routing.health.eject_for", Millis{1}, h.eject_for);
    }
  }
  if (auto v = get(f, "breaker")) parse_breaker(*v, "routing.breaker", rs.breaker);
  if (auto v = get(f, "provider_breaker")) parse_breaker(*v, "routing.provider_breaker", rs.provider_breaker);
  if (auto v = get(f, "webhook")) {
    std::string url;
    if (get_string(*v, "routing.webhook", url)) {
      Backend parsed;
      if (url.empty() || report(check_webhook_url(url, parsed), "routing.webhook", *v)) rs.webhook_url = url;
    }
  }
}

void Loader::parse_ranges(const YAML::Node& n, const std::string& path,
                          std::map<std::string, Range, std::less<>>& out) {
  out.clear();
  if (n.IsNull()) return;
  if (!n.IsMap()) {
    error(path, line_of(n), std::string("expected a map of name: {min, max, integer}, got ") + kind_of(n));
    return;
  }
  for (auto it = n.begin(); it != n.end(); ++it) {
    const YAML::Node key = it->first, val = it->second;
    if (val.IsNull()) note_null(val, line_of(key));
    if (!key.IsScalar() || key.Scalar().empty()) {
      error(path, line_of(key), "expected a parameter name");
      continue;
    }
    const std::string name = key.Scalar();
    const std::string rp = join(path, name);
    if (out.count(name)) {
      error(rp, line_of(key), "duplicate key");
      continue;
    }
    Range r{-kTwo53, kTwo53, false};
    Fields f;
    if (!fields(val, rp, {"min", "max", "integer"}, f)) continue;
    bool ok = true;
    if (auto v = get(f, "min")) ok &= get_double(*v, join(rp, "min"), -kTwo53, kTwo53, r.min);
    if (auto v = get(f, "max")) ok &= get_double(*v, join(rp, "max"), -kTwo53, kTwo53, r.max);
    if (auto v = get(f, "integer")) ok &= get_bool(*v, join(rp, "integer"), r.integer);
    if (ok && r.min > r.max) {
      error(rp, line_of(val), "min (" + fmt_num(r.min) + ") is greater than max (" + fmt_num(r.max) + ")");
    }
    out.emplace(name, r);
  }
}


// "auto" (-1) or a count from 0 (off) to `max`.
bool Loader::get_lease(const YAML::Node& n, const std::string& path, long long max, std::int64_t& out) {
  std::string text;
  if (!scalar(n, path, "an integer or auto", text)) return false;
  if (trim(text) == "auto") {
    out = -1;
    return true;
  }
  return get_int(n, path, 0, max, out);
}

bool Loader::get_priority(const YAML::Node& n, const std::string& path, Priority& out) {
  std::string name;
  if (!get_string(n, path, name)) return false;
  if (auto pr = priority_from_name(name)) {
    out = *pr;
    return true;
  }
  error(path, line_of(n), "unknown priority " + q(name) + " (expected vip, premium or standard)" + std::string(suffix_));
  return false;
}

void Loader::parse_redis(const YAML::Node& n, Config& c) {
  Fields f;
  if (n.IsNull() || !fields(n, "redis", {"url", "timeout", "connect_timeout", "retry_interval", "key_prefix"}, f)) {
    return;
  }
  auto& r = c.redis;
  if (auto v = get(f, "url")) {
    std::string err;
    if (get_string(*v, "redis.url", r.url) && !parse_redis_url(r.url, &err)) error("redis.url", line_of(*v), err);
  }
  const Millis positive{1};
  if (auto v = get(f, "timeout")) get_duration(*v, "redis.timeout", positive, r.timeout);
  if (auto v = get(f, "connect_timeout")) get_duration(*v, "redis.connect_timeout", positive, r.connect_timeout);
  if (auto v = get(f, "retry_interval")) get_duration(*v, "redis.retry_interval", positive, r.retry_interval);
  if (auto v = get(f, "key_prefix")) {
    if (get_string(*v, "redis.key_prefix", r.key_prefix)) {
      if (r.key_prefix.empty() || has_space_or_ctl(r.key_prefix) || r.key_prefix.find_first_of("{}") != std::string::npos) {
        error("redis.key_prefix", line_of(*v), "must be non-empty, without spaces, control characters or braces");
      }
    }
  }
}

// Fields shared by request and token limits: scope, filters, limit, on_redis_down.
bool Loader::parse_limit_common(const YAML::Node& n, const std::string& path, Fields& f, LimitScope& scope,
                                LimitMatch& when, DownPolicy& down, std::int64_t& limit) {
  auto p = [&](std::string_view k) { return join(path, k); };
  bool ok = true;
  if (auto v = get(f, "scope")) {
    std::string name;
    if (get_string(*v, p("scope"), name)) {
      if (name == "key") scope = LimitScope::key;
      else if (name == "tier") scope = LimitScope::tier;
      else if (name == "tenant") scope = LimitScope::tenant;
      else if (name == "model") scope = LimitScope::model;
      else if (name == "tenant_model") scope = LimitScope::tenant_model;
      else {
        error(p("scope"), line_of(*v), "unknown scope " + q(name) + " (expected key, tier, tenant, model or tenant_model)");
        ok = false;
      }
    } else {
      ok = false;
    }
  } else {
    error(path, line_of(n), "missing required key 'scope' (key, tier, tenant, model or tenant_model)");
    ok = false;
  }
  auto filter = [&](std::string_view field, std::string& out) {
    if (auto v = get(f, field)) {
      if (get_string(*v, p(field), out) && out.empty()) error(p(field), line_of(*v), "must not be empty (omit it to match any)");
      limit_filters_.push_back({p(field), line_of(*v), std::string(field), out});
    }
  };
  filter("key", when.key);
  filter("tier", when.tier);
  filter("tenant", when.tenant);
  filter("model", when.model);
  if (auto v = get(f, "on_redis_down")) {
    std::string name;
    if (get_string(*v, p("on_redis_down"), name)) {
      if (name == "open") down = DownPolicy::open;
      else if (name == "closed") down = DownPolicy::closed;
      else error(p("on_redis_down"), line_of(*v), "expected open (count per instance) or closed (refuse)");
    }
  }
  if (auto v = get(f, "limit")) {
    ok &= get_int(*v, p("limit"), 1, 1'000'000'000'000'000LL, limit);
  } else {
    error(path, line_of(n), "missing required key 'limit'");
    ok = false;
  }
  return ok;
}

void Loader::parse_rate_limits(const YAML::Node& n, Config& c) {
  Fields f;
  if (n.IsNull() || !fields(n, "rate_limits",
                            {"backend", "on_redis_down", "requests", "tokens", "reserve_output_tokens",
                             "reservation_ttl"},
                            f)) {
    return;
  }
  auto& rl = c.rate_limits;
  if (auto v = get(f, "backend")) {
    std::string name;
    if (get_string(*v, "rate_limits.backend", name)) {
      if (name == "memory") rl.backend = LimiterBackend::memory;
      else if (name == "redis") rl.backend = LimiterBackend::redis;
      else if (name == "auto") rl.backend = LimiterBackend::auto_;
      else error("rate_limits.backend", line_of(*v), "unknown backend " + q(name) + " (expected memory, redis or auto)");
    }
  }
  if (auto v = get(f, "on_redis_down")) {
    std::string name;
    if (get_string(*v, "rate_limits.on_redis_down", name)) {
      if (name == "open") rl.on_redis_down = DownPolicy::open;
      else if (name == "closed") rl.on_redis_down = DownPolicy::closed;
      else error("rate_limits.on_redis_down", line_of(*v), "expected open (count per instance) or closed (refuse)");
    }
  }
  if (auto v = get(f, "reserve_output_tokens"))
    get_int(*v, "rate_limits.reserve_output_tokens", 0, 100'000'000, rl.reserve_output_tokens);
  if (auto v = get(f, "reservation_ttl")) {
    get_duration(*v, "rate_limits.reservation_ttl", Millis{1000}, rl.reservation_ttl);
    reservation_ttl_line_ = line_of(*v);
  }

  auto list = [&](const char* name) -> const YAML::Node* {
    const YAML::Node* v = get(f, name);
    if (!v || v->IsNull()) return nullptr;
    if (!v->IsSequence()) {
      error(std::string("rate_limits.") + name, line_of(*v), std::string("expected a list of limits, got ") + kind_of(*v));
      return nullptr;
    }
    return v;
  };
  if (const YAML::Node* v = list("requests")) {
    for (size_t i = 0; i < v->size(); ++i) {
      const YAML::Node ln = (*v)[i];
      const std::string path = index("rate_limits.requests", i);
      Fields lf;
      if (!fields(ln, path,
                  {"scope", "key", "tier", "tenant", "model", "algorithm", "limit", "window", "burst", "on_redis_down",
                   "lease"},
                  lf)) {
        continue;
      }
      RequestLimit l;
      l.id = "requests[" + std::to_string(i) + "]";
      bool ok = parse_limit_common(ln, path, lf, l.scope, l.when, l.on_redis_down, l.limit);
      if (auto a = get(lf, "algorithm")) {
        std::string name;
        if (get_string(*a, join(path, "algorithm"), name)) {
          if (name == "fixed_window") l.algorithm = LimitAlgorithm::fixed_window;
          else if (name == "sliding_window") l.algorithm = LimitAlgorithm::sliding_window;
          else if (name == "token_bucket") l.algorithm = LimitAlgorithm::token_bucket;
          else if (name == "sliding_log") l.algorithm = LimitAlgorithm::sliding_log;
          else error(join(path, "algorithm"), line_of(*a),
                     "unknown algorithm " + q(name) + " (expected fixed_window, sliding_window, sliding_log or token_bucket)");
        }
      }
      if (auto w = get(lf, "window")) ok &= get_duration(*w, join(path, "window"), Millis{1000}, l.window);
      if (auto b = get(lf, "burst")) {
        if (l.algorithm != LimitAlgorithm::token_bucket) {
          error(join(path, "burst"), line_of(*b), "burst applies only to algorithm token_bucket");
        } else {
          ok &= get_int(*b, join(path, "burst"), 1, 1'000'000'000'000LL, l.burst);
        }
      }
      if (l.burst == 0) l.burst = l.limit;
      if (auto ls = get(lf, "lease")) ok &= get_lease(*ls, join(path, "lease"), 1'000'000'000LL, l.lease);
      if (l.algorithm == LimitAlgorithm::sliding_log) {
        // One entry per request in the window, in Redis and in memory: exact, for small limits.
        if (l.limit > kMaxSlidingLog) {
          const auto* at = get(lf, "limit");
          error(join(path, "limit"), at ? line_of(*at) : line_of(ln),
                "algorithm sliding_log keeps one entry per request of the window: limit at most " +
                    std::to_string(kMaxSlidingLog) + " (got " + std::to_string(l.limit) + "); use sliding_window for larger limits");
          ok = false;
        }
        if (l.lease > 0) {
          error(join(path, "lease"), line_of(*get(lf, "lease")),
                "algorithm sliding_log is never leased (every request is logged): remove lease");
          ok = false;
        }
        l.lease = 0;
      }
      if (l.lease < 0) l.lease = l.limit >= 1000 ? std::min<std::int64_t>(l.limit / 1000, 1000) : 0;
      if (ok) rl.requests.push_back(std::move(l));
    }
  }
  if (const YAML::Node* v = list("tokens")) {
    for (size_t i = 0; i < v->size(); ++i) {
      const YAML::Node ln = (*v)[i];
      const std::string path = index("rate_limits.tokens", i);
      Fields lf;
      if (!fields(ln, path, {"scope", "key", "tier", "tenant", "model", "limit", "per", "on_redis_down", "lease"}, lf))
        continue;
      TokenLimit l;
      l.id = "tokens[" + std::to_string(i) + "]";
      bool ok = parse_limit_common(ln, path, lf, l.scope, l.when, l.on_redis_down, l.limit);
      if (auto a = get(lf, "per")) {
        std::string name;
        if (get_string(*a, join(path, "per"), name)) {
          if (name == "minute") l.per = QuotaPeriod::minute;
          else if (name == "hour") l.per = QuotaPeriod::hour;
          else if (name == "day") l.per = QuotaPeriod::day;
          else if (name == "month") l.per = QuotaPeriod::month;
          else {
            error(join(path, "per"), line_of(*a), "unknown period " + q(name) + " (expected minute, hour, day or month)");
            ok = false;
          }
        }
      } else {
        error(path, line_of(ln), "missing required key 'per' (minute, hour, day or month)");
        ok = false;
      }
      if (auto ls = get(lf, "lease")) ok &= get_lease(*ls, join(path, "lease"), 1'000'000'000'000LL, l.lease);
      if (ok) rl.tokens.push_back(std::move(l));
    }
  }
}

void Loader::parse_admin(const YAML::Node& n, Config& c) {
  Fields f;
  if (n.IsNull() || !fields(n, "admin", {"listen", "public_status"}, f)) return;
  if (auto v = get(f, "listen")) {
    std::string s;
    if (get_string(*v, "admin.listen", s)) {
      report(check_host_port(trim(s), c.admin_listen_host, c.admin_listen_port), "admin.listen", *v);
    }
  }
  if (auto v = get(f, "public_status")) get_bool(*v, "admin.public_status", c.public_status);
}

void Loader::parse_concurrency(const YAML::Node& n, Config& c) {
  Fields f;
  if (n.IsNull() || !fields(n, "concurrency", {"per_key", "queue_size", "max_wait", "tier_priority"}, f)) return;
  auto& cc = c.concurrency;
  if (auto v = get(f, "per_key")) get_int(*v, "concurrency.per_key", 0, 1'000'000, cc.per_key);
  if (auto v = get(f, "queue_size")) get_int(*v, "concurrency.queue_size", 0, 1'000'000, cc.queue_size);
  if (auto v = get(f, "max_wait")) {
    Fields wf;
    if (!v->IsNull() && fields(*v, "concurrency.max_wait", {"vip", "premium", "standard"}, wf)) {
      for (Priority pr : {Priority::standard, Priority::premium, Priority::vip}) {
        const std::string name(to_string(pr));
        if (auto w = get(wf, name)) {
          get_duration(*w, "concurrency.max_wait." + name, Millis{0}, cc.max_wait[static_cast<int>(pr)]);
        }
      }
    }
  }
  if (auto v = get(f, "tier_priority")) {
    if (!v->IsNull()) {
      if (!v->IsMap()) {
        error("concurrency.tier_priority", line_of(*v), std::string("expected a map of tier: class, got ") + kind_of(*v));
      } else {
        for (auto it = v->begin(); it != v->end(); ++it) {
          const YAML::Node k = it->first;
          const YAML::Node val = it->second;
          std::string tier;
          if (!get_string(k, "concurrency.tier_priority", tier)) continue;
          Priority pr{};
          if (get_priority(val, join("concurrency.tier_priority", tier), pr)) cc.tier_priority[tier] = pr;
        }
      }
    }
  }
}

std::string Loader::resolve_path(const std::string& p) const {
  if (p.empty() || p == "-") return p;
  fs::path path(p);
  if (path.is_relative()) path = base_dir_ / path;
  return path.lexically_normal().string();
}

bool is_postgres_url(std::string_view u) {
  return u.starts_with("postgres://") || u.starts_with("postgresql://");
}

void Loader::parse_history(const YAML::Node& n, Config& c) {
  Fields f;
  if (n.IsNull() || !fields(n, "history",
                            {"backend", "path", "url", "batch_rows", "flush_interval", "queue_size", "retry_interval",
                             "connect_timeout", "retention_days"},
                            f)) {
    return;
  }
  auto& h = c.history;
  bool backend_set = false;
  if (auto v = get(f, "backend")) {
    std::string name;
    if (get_string(*v, "history.backend", name)) {
      backend_set = true;
      if (name == "sqlite") h.backend = HistoryBackend::sqlite;
      else if (name == "postgres" || name == "postgresql") h.backend = HistoryBackend::postgres;
      else if (name == "none" || name == "off") h.backend = HistoryBackend::none;
      else error("history.backend", line_of(*v), "unknown backend " + q(name) + " (expected sqlite, postgres or none)");
    }
  }
  if (auto v = get(f, "path")) {
    if (get_string(*v, "history.path", h.sqlite_path)) h.sqlite_path = resolve_path(h.sqlite_path);
  }
  if (auto v = get(f, "url")) {
    if (get_string(*v, "history.url", h.url) && !h.url.empty()) {
      if (!is_postgres_url(h.url)) error("history.url", line_of(*v), "expected a postgres:// or postgresql:// URL");
      else if (!backend_set) h.backend = HistoryBackend::postgres;
    }
  }
  if (auto v = get(f, "batch_rows")) get_int(*v, "history.batch_rows", 1, 100'000, h.batch_rows);
  if (auto v = get(f, "flush_interval")) get_duration(*v, "history.flush_interval", Millis{1}, h.flush_interval);
  if (auto v = get(f, "queue_size")) get_int(*v, "history.queue_size", 1, 10'000'000, h.queue_size);
  if (auto v = get(f, "retry_interval")) get_duration(*v, "history.retry_interval", Millis{1}, h.retry_interval);
  if (auto v = get(f, "connect_timeout")) get_duration(*v, "history.connect_timeout", Millis{1}, h.connect_timeout);
  if (auto v = get(f, "retention_days")) get_int(*v, "history.retention_days", 0, 100'000, h.retention_days);
}

void Loader::parse_events(const YAML::Node& n, Config& c) {
  Fields f;
  if (n.IsNull() || !fields(n, "events",
                            {"brokers", "topic", "fallback_file", "fallback_max_bytes", "queue_messages", "linger",
                             "compression", "delivery_timeout", "include_completed"},
                            f)) {
    return;
  }
  auto& e = c.events;
  if (auto v = get(f, "brokers")) {
    if (get_string(*v, "events.brokers", e.brokers)) e.enabled = !e.brokers.empty();
  }
  if (auto v = get(f, "topic")) {
    if (get_string(*v, "events.topic", e.topic)) {
      const bool ok = !e.topic.empty() && e.topic.size() <= 249 &&
                      e.topic.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                          std::string::npos;
      if (!ok) error("events.topic", line_of(*v), "a Kafka topic is 1-249 characters of [a-zA-Z0-9._-]");
    }
  }
  if (auto v = get(f, "fallback_file")) {
    if (get_string(*v, "events.fallback_file", e.fallback_file)) e.fallback_file = resolve_path(e.fallback_file);
  }
  if (auto v = get(f, "fallback_max_bytes")) {
    std::int64_t max = 0;
    if (get_int(*v, "events.fallback_max_bytes", 0, std::int64_t{1} << 50, max)) {
      e.fallback_max_bytes = static_cast<std::uint64_t>(max);
    }
  }
  if (auto v = get(f, "queue_messages")) get_int(*v, "events.queue_messages", 1, 10'000'000, e.queue_messages);
  if (auto v = get(f, "linger")) get_duration(*v, "events.linger", Millis{0}, e.linger);
  if (auto v = get(f, "compression")) {
    if (get_string(*v, "events.compression", e.compression) && e.compression != "none" && e.compression != "lz4" &&
        e.compression != "snappy" && e.compression != "gzip" && e.compression != "zstd") {
      error("events.compression", line_of(*v), "must be none, lz4, snappy, gzip or zstd");
    }
  }
  if (auto v = get(f, "delivery_timeout")) get_duration(*v, "events.delivery_timeout", Millis{1}, e.delivery_timeout);
  if (auto v = get(f, "include_completed")) get_bool(*v, "events.include_completed", e.include_completed);
}

void Loader::apply_env(Config& c) {
  if (auto v = getenv("SLUICE_LISTEN")) {
    std::string host;
    std::uint16_t port = 0;
    if (auto e = check_host_port(trim(*v), host, port); !e.empty()) error("env SLUICE_LISTEN", 0, e);
    else { c.listen_host = host; c.listen_port = port; }
  }
  if (auto v = getenv("HOST")) {
    std::string_view h = trim(*v);
    if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    const bool v6 = h.find(':') != std::string_view::npos;
    // An IPv6 literal is fine here: HOST holds only the host, so there is no port to confuse.
    auto e = v6 ? (has_space_or_ctl(h) || h.find_first_of("/?#@[]") != std::string_view::npos
                       ? "invalid host " + q(h)
                       : std::string())
                : check_host(h);
    std::string host(h);
    if (e.empty()) e = check_listen_host(host);
    if (!e.empty()) error("env HOST", 0, e);
    else c.listen_host = std::move(host);
  }
  if (auto v = getenv("PORT")) {
    long long port = 0;
    if (auto e = check_int(trim(*v), 0, 65535, port); !e.empty()) error("env PORT", 0, e);
    else c.listen_port = static_cast<std::uint16_t>(port);
  }
  if (auto v = getenv("SLUICE_WORKERS")) {
    long long w = 0;
    if (auto e = check_int(trim(*v), 0, 1024, w); !e.empty()) error("env SLUICE_WORKERS", 0, e);
    else c.workers = static_cast<int>(w);
  }
  if (auto v = getenv("SLUICE_INSTANCE")) {
    if (has_ctl(*v)) error("env SLUICE_INSTANCE", 0, "must not contain control characters");
    else c.instance = *v;
  }
  if (auto v = getenv("SLUICE_TOKENIZER_DIR")) {
    if (!files_.is_directory(*v)) error("env SLUICE_TOKENIZER_DIR", 0, "not a directory: " + *v);
    else c.tokenizer_dir = *v;
  }
  if (auto v = getenv("SLUICE_REDIS_URL")) {
    std::string err;
    if (!parse_redis_url(*v, &err)) error("env SLUICE_REDIS_URL", 0, err);
    else c.redis.url = *v;
  }
  if (auto v = getenv("SLUICE_DATA_DIR")) c.data_dir = *v;
  if (auto v = getenv("SLUICE_DATABASE_URL")) {
    if (!is_postgres_url(*v)) error("env SLUICE_DATABASE_URL", 0, "expected a postgres:// or postgresql:// URL");
    else { c.history.url = *v; c.history.backend = HistoryBackend::postgres; }
  }
  if (auto v = getenv("SLUICE_HISTORY_BACKEND")) {
    const std::string_view b = trim(*v);
    if (b == "sqlite") c.history.backend = HistoryBackend::sqlite;
    else if (b == "postgres" || b == "postgresql") c.history.backend = HistoryBackend::postgres;
    else if (b == "none" || b == "off") c.history.backend = HistoryBackend::none;
    else error("env SLUICE_HISTORY_BACKEND", 0, "unknown backend " + q(b) + " (expected sqlite, postgres or none)");
  }
  if (auto v = getenv("SLUICE_KAFKA_BROKERS")) { c.events.brokers = *v; c.events.enabled = true; }
  if (auto v = getenv("SLUICE_KAFKA_TOPIC")) c.events.topic = *v;
  if (auto v = getenv("SLUICE_RATE_LIMIT_BACKEND")) {
    const std::string_view b = trim(*v);
    auto& rl = c.rate_limits;
    if (b == "memory") rl.backend = LimiterBackend::memory;
    else if (b == "redis") rl.backend = LimiterBackend::redis;
    else if (b == "auto") rl.backend = LimiterBackend::auto_;
    else error("env SLUICE_RATE_LIMIT_BACKEND", 0, "unknown backend " + q(b) + " (expected memory, redis or auto)");
  }
  // Empty SLUICE_ACCESS_LOG is meaningful ("" = off), so it is read unfiltered.
  if (auto v = env_ ? env_("SLUICE_ACCESS_LOG") : std::nullopt) c.access_log = *v;
  if (auto v = getenv("SLUICE_API_KEYS")) {
    std::string_view rest = *v;
    size_t n = 0;
    while (true) {
      const auto comma = rest.find(',');
      const std::string_view entry = trim(rest.substr(0, comma));
      if (!entry.empty()) {
        ++n;
        const auto colon = entry.find(':');
        ApiKey k;
        k.tenant = "default";
        k.models = {"*"};
        if (colon == std::string_view::npos) {
          error("env SLUICE_API_KEYS", 0, "entry " + std::to_string(n) + " is not name:secret");
        } else {
          k.name = std::string(trim(entry.substr(0, colon)));
          k.key = std::string(trim(entry.substr(colon + 1)));
          if (auto e = check_ident(k.name); !e.empty()) {
            error("env SLUICE_API_KEYS", 0, "entry " + std::to_string(n) + " name: " + e);
          } else if (auto e2 = check_key_secret(k.key, k.name); !e2.empty()) {
            error("env SLUICE_API_KEYS", 0, "entry " + std::to_string(n) + ": " + e2);
          } else {
            KeyOrigin o;
            o.entry = o.name = o.secret = {"env SLUICE_API_KEYS", 0};
            c.keys.push_back(std::move(k));
            key_origins_.push_back(std::move(o));
          }
        }
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
}

void Loader::validate(Config& c, const YAML::Node* models_node) {
  if (c.history.backend == HistoryBackend::postgres && c.history.url.empty()) {
    error("history.url", 0, "backend postgres needs a URL (history.url or SLUICE_DATABASE_URL)");
  }
  if (c.events.enabled && c.events.delivery_timeout <= c.events.linger) {
    error("events.delivery_timeout", 0, "must be longer than events.linger (Kafka's message.timeout.ms > linger.ms)");
  }
  if (c.history.sqlite_path.empty()) c.history.sqlite_path = (fs::path(c.data_dir) / "history.db").string();
  if (c.events.fallback_file.empty()) c.events.fallback_file = (fs::path(c.data_dir) / "events-fallback.jsonl").string();
  if (c.routes.empty()) {
    error("models", models_node ? line_of(*models_node) : 0, "at least one route is required");
  }
  std::unordered_map<std::string_view, size_t> aliases;
  for (size_t i = 0; i < c.routes.size(); ++i) {
    const auto& a = c.routes[i].alias;
    if (a.empty()) continue;
    auto [it, fresh] = aliases.emplace(a, i);
    if (!fresh) {
      const auto& first = route_origins_[it->second].at;
      error(route_origins_[i].at.path, route_origins_[i].at.line,
            "duplicate alias " + q(a) + " (first defined at " + first.path +
                (first.line ? ", line " + std::to_string(first.line) : std::string()) + ")");
    }
  }
  std::unordered_map<std::string_view, size_t> names, secrets;
  for (size_t i = 0; i < c.keys.size(); ++i) {
    const ApiKey& k = c.keys[i];
    const KeyOrigin& o = key_origins_[i];
    if (!k.name.empty()) {
      auto [it, fresh] = names.emplace(k.name, i);
      if (!fresh) {
        error(o.name.path, o.name.line,
              "duplicate key name " + q(k.name) + " (first used at " + key_origins_[it->second].name.path + ")");
      }
    }
    if (!k.key.empty()) {
      auto [it, fresh] = secrets.emplace(k.key, i);
      if (!fresh) {
        // Never print the secret itself: name the other key instead.
        error(o.secret.path, o.secret.line,
              "duplicate secret: key " + q(k.name) + " has the same secret as key " +
                  q(c.keys[it->second].name));
      }
    }
    for (size_t m = 0; m < k.models.size() && m < o.models.size(); ++m) {
      if (k.models[m] != "*" && !aliases.count(k.models[m])) {
        error(o.models[m].path, o.models[m].line, "unknown model alias " + q(k.models[m]));
      }
    }
  }
  // A filter naming nothing that exists is surely a typo: the limit would never apply.
  for (const auto& lf : limit_filters_) {
    if (lf.value.empty()) continue;
    if (lf.field == "model" && !aliases.count(lf.value)) error(lf.path, lf.line, "unknown model alias " + q(lf.value));
    if (lf.field == "key" && !names.count(lf.value)) error(lf.path, lf.line, "unknown key name " + q(lf.value));
  }
  name_backends(c);
  check_backends(c);
  check_route_links(c, aliases);
  auto& rl = c.rate_limits;
  if (rl.reservation_ttl.count() == 0) {
    rl.reservation_ttl = c.timeouts.total + Millis(60000);
  } else if (rl.reservation_ttl < c.timeouts.total) {
    // A request may run for timeouts.total: its reservation would expire under it, and
    // what it holds be admitted again meanwhile.
    error("rate_limits.reservation_ttl", reservation_ttl_line_,
          "must be at least timeouts.total (" + std::to_string(c.timeouts.total.count()) +
              " ms): a running request's reservation would expire under it (default: timeouts.total + 1m)");
  }
  // `redis` means the shared count is the point: refuse while Redis is down unless told
  // otherwise. `auto` prefers serving: it counts per instance meanwhile.
  if (rl.on_redis_down == DownPolicy::inherit) {
    rl.on_redis_down = rl.backend == LimiterBackend::redis ? DownPolicy::closed : DownPolicy::open;
  }
  for (auto& l : rl.requests) {
    if (l.on_redis_down == DownPolicy::inherit) l.on_redis_down = rl.on_redis_down;
  }
  for (auto& l : rl.tokens) {
    if (l.on_redis_down == DownPolicy::inherit) l.on_redis_down = rl.on_redis_down;
  }
}

std::string endpoint_of(const Backend& b) { return host_for_display(b.host) + ":" + std::to_string(b.port); }

// Default names: host:port for an external backend; when several different backends
// (provider, scheme, path, model, credential or TLS settings) share the host:port,
// host:port/model if the model tells them apart, else provider:host:port/model if that
// does, else host:port#k (k-th seen there, from 1). simulated:<alias>
// (simulated:<alias>#<i> in a route with several backends) for a simulated one.
void Loader::name_backends(Config& c) {
  auto identity = [](const Backend& b) {
    return std::string(to_string(b.provider)) + (b.tls ? " tls " : " tcp ") + b.path_prefix + " " + b.model +
           (b.tls_verify ? " verify " : " noverify ") + b.ca_file + " " + b.api_key;
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
void Loader::check_backends(Config& c) {
  struct Use {
    size_t route, idx;
  };
  std::map<std::string, std::vector<Use>, std::less<>> by_name;
  for (size_t i = 0; i < c.routes.size() && i < route_origins_.size(); ++i) {
    const Route& r = c.routes[i];
    for (size_t j = 0; j < r.backends.size() && j < route_origins_[i].backends.size(); ++j) {
      if (r.backends[j].name.empty() || !route_origins_[i].backends[j].valid) continue;
      by_name[r.backends[j].name].push_back({i, j});
    }
  }
  auto where = [&](const Use& u) {
    const BackendOrigin& o = route_origins_[u.route].backends[u.idx];
    return o.path + (o.line ? ", line " + std::to_string(o.line) : std::string()) + ", route " +
           q(c.routes[u.route].alias);
  };
  for (auto& [name, uses] : by_name) {
    const Use* limit_from = nullptr;  // the first use that sets max_in_flight
    for (size_t k = 0; k < uses.size(); ++k) {
      const Use& u = uses[k];
      const Backend& b = c.routes[u.route].backends[u.idx];
      const BackendOrigin& o = route_origins_[u.route].backends[u.idx];
      const Use& first = uses[0];
      const Backend& fb = c.routes[first.route].backends[first.idx];
      if (k > 0) {
        const auto same_route = std::find_if(uses.begin(), uses.begin() + static_cast<std::ptrdiff_t>(k),
                                             [&](const Use& e) { return e.route == u.route; });
        if (same_route != uses.begin() + static_cast<std::ptrdiff_t>(k)) {
          error(o.path, o.line,
                "backend name " + q(name) + " appears twice in this route (also at " + where(*same_route) +
                    "); a backend may be listed only once per route (set 'name' to tell two apart)");
          continue;
        }
        if (b.provider == Provider::simulated || fb.provider == Provider::simulated) {
          error(o.path, o.line,
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
        if (b.ca_file != fb.ca_file) diffs.push_back("ca_file");
        if (b.api_key != fb.api_key) diffs.push_back("credential");  // never print it
        if (!diffs.empty()) {
          std::string list;
          for (size_t d = 0; d < diffs.size(); ++d) list += (d ? ", " : "") + diffs[d];
          error(o.path, o.line,
                "backend " + q(name) + " differs from the one at " + where(first) + " in " + list +
                    "; backends with the same name are one backend and must agree on provider, base_url, "
                    "model, credentials, TLS settings, max_in_flight and probe (set 'name' to tell them apart)");
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
        error(o.path, o.line,
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
  for (size_t i = 0; i < c.routes.size() && i < route_origins_.size(); ++i) {
    const Route& r = c.routes[i];
    if (!r.breaker) continue;
    for (const auto& b : r.backends) {
      if (b.name.empty()) continue;
      auto [it, fresh] = owner.emplace(b.name, i);
      if (fresh || it->second == i || same(*c.routes[it->second].breaker, *r.breaker)) continue;
      const Origin& other = route_origins_[it->second].breaker;
      error(route_origins_[i].breaker.path, route_origins_[i].breaker.line,
            "breaker differs from the one route " + q(c.routes[it->second].alias) + " sets (" + other.path +
                (other.line ? ", line " + std::to_string(other.line) : std::string()) + ") for the shared backend " +
                q(b.name) + "; a backend has one breaker");
      break;
    }
  }
}

void Loader::check_route_links(const Config& c, const std::unordered_map<std::string_view, size_t>& aliases) {
  for (size_t i = 0; i < c.routes.size() && i < route_origins_.size(); ++i) {
    const Route& r = c.routes[i];
    const RouteOrigin& o = route_origins_[i];
    std::set<std::string_view> seen;
    for (size_t k = 0; k < r.fallbacks.size() && k < o.fallbacks.size(); ++k) {
      const std::string& fb = r.fallbacks[k];
      const Origin& at = o.fallbacks[k];
      if (fb == r.alias) error(at.path, at.line, "a route cannot be its own fallback");
      else if (!aliases.count(fb)) error(at.path, at.line, "unknown model alias " + q(fb));
      else if (!seen.insert(fb).second) error(at.path, at.line, "duplicate fallback " + q(fb));
    }
    if (r.canary && !r.canary->alias.empty()) {
      const std::string& ca = r.canary->alias;
      if (ca == r.alias) error(o.canary.path, o.canary.line, "a route cannot be its own canary");
      else if (!aliases.count(ca)) error(o.canary.path, o.canary.line, "unknown model alias " + q(ca));
    }
  }
}

LoadResult Loader::run(const YAML::Node& root) {
  auto c = std::make_shared<Config>();
  const YAML::Node* models_node = nullptr;
  bool have_params = false, have_options = false;
  Fields f;
  if (!root.IsNull()) {
    if (!root.IsMap()) {
      error("", line_of(root), std::string("expected a map of settings at the top level, got ") + kind_of(root));
    } else {
      fields(root, "",
             {"instance", "listen", "workers", "limits", "timeouts", "access_log", "keys", "keys_file", "models",
              "params", "options", "redis", "rate_limits", "concurrency", "tokenizer_dir", "data_dir", "history",
              "events", "routing", "admin"},
             f);
    }
  }
  if (auto v = get(f, "instance")) {
    if (get_string(*v, "instance", c->instance)) {
      if (c->instance.empty()) error("instance", line_of(*v), "must not be empty (omit it for the default)");
      else if (has_ctl(c->instance)) error("instance", line_of(*v), "must not contain control characters");
    }
  }
  if (auto v = get(f, "listen")) {
    std::string s;
    if (get_string(*v, "listen", s)) report(check_host_port(trim(s), c->listen_host, c->listen_port), "listen", *v);
  }
  if (auto v = get(f, "workers")) get_int(*v, "workers", 0, 1024, c->workers);
  if (auto v = get(f, "limits")) parse_limits(*v, *c);
  if (auto v = get(f, "timeouts")) parse_timeouts(*v, *c);
  if (auto v = get(f, "redis")) parse_redis(*v, *c);
  if (auto v = get(f, "tokenizer_dir")) {
    if (get_string(*v, "tokenizer_dir", c->tokenizer_dir) && !c->tokenizer_dir.empty()) {
      fs::path p(c->tokenizer_dir);
      if (p.is_relative()) p = base_dir_ / p;
      if (!files_.is_directory(p.string())) error("tokenizer_dir", line_of(*v), "not a directory: " + p.string());
      else c->tokenizer_dir = p.string();
    }
  }
  if (auto v = get(f, "concurrency")) parse_concurrency(*v, *c);
  if (auto v = get(f, "admin")) parse_admin(*v, *c);
  if (auto v = get(f, "data_dir")) {
    if (get_string(*v, "data_dir", c->data_dir)) {
      if (c->data_dir.empty()) error("data_dir", line_of(*v), "must not be empty (omit it for the default, ./data)");
      else c->data_dir = resolve_path(c->data_dir);
    }
  }
  if (auto v = get(f, "history")) parse_history(*v, *c);
  if (auto v = get(f, "events")) parse_events(*v, *c);
  if (auto v = get(f, "access_log")) {
    if (v->IsNull()) error("access_log", line_of(*v), "expected a string (\"-\" = stdout, \"\" = off, or a path), got nothing (null)");
    else get_string(*v, "access_log", c->access_log);
  }
  // Before the routes: a route's breaker override starts from routing.breaker.
  if (auto v = get(f, "routing")) parse_routing(*v, *c);
  if (auto v = get(f, "models")) {
    models_node = v;
    if (!v->IsNull()) {
      if (!v->IsSequence()) {
        error("models", line_of(*v), std::string("expected a list of routes, got ") + kind_of(*v));
      } else {
        for (size_t i = 0; i < v->size(); ++i) {
          const YAML::Node rn = (*v)[i];
          const std::string path = index("models", i);
          Route r;
          RouteOrigin o;
          parse_route(rn, path, *c, r, o);
          c->routes.push_back(std::move(r));
          route_origins_.push_back(std::move(o));
        }
      }
    }
  }
  if (auto v = get(f, "keys")) parse_keys(*v, "keys", *c);
  if (auto v = get(f, "keys_file")) load_keys_file(*v, *c);
  if (auto v = get(f, "params")) { parse_ranges(*v, "params", c->params); have_params = true; }
  if (auto v = get(f, "options")) { parse_ranges(*v, "options", c->options); have_options = true; }
  if (!have_params) c->params = default_params();
  if (!have_options) c->options = default_options();
  // After the routes and keys: limit filters name them.
  if (auto v = get(f, "rate_limits")) parse_rate_limits(*v, *c);

  apply_env(*c);
  validate(*c, models_node);

  // With port 0 the port is known only after binding; the gateway then names the
  // instance itself (host name and pid).
  if (c->instance.empty() && c->listen_port != 0) c->instance = local_hostname() + ":" + std::to_string(c->listen_port);

  // Report in reading order: the main file by line, then the keys file, then the
  // environment (stable, so errors on one line keep the order they were found in).
  auto group = [](const ConfigError& e) {
    if (e.key.rfind("env ", 0) == 0) return 2;
    if (e.key.rfind("keys_file[", 0) == 0) return 1;
    return 0;
  };
  std::stable_sort(errors_.begin(), errors_.end(), [&](const ConfigError& a, const ConfigError& b) {
    auto line = [](const ConfigError& e) { return e.line > 0 ? e.line : std::numeric_limits<int>::max(); };
    return std::pair(group(a), line(a)) < std::pair(group(b), line(b));
  });

  LoadResult res;
  if (errors_.empty()) res.config = std::move(c);
  else res.errors = std::move(errors_);
  return res;
}

}  // namespace

// ---------------------------------------------------------------------------------------

std::string_view to_string(LimitScope s) noexcept {
  switch (s) {
    case LimitScope::key: return "key";
    case LimitScope::tier: return "tier";
    case LimitScope::tenant: return "tenant";
    case LimitScope::model: return "model";
    case LimitScope::tenant_model: return "tenant_model";
  }
  return "?";
}

std::string_view to_string(LimitAlgorithm a) noexcept {
  switch (a) {
    case LimitAlgorithm::fixed_window: return "fixed_window";
    case LimitAlgorithm::sliding_window: return "sliding_window";
    case LimitAlgorithm::token_bucket: return "token_bucket";
    case LimitAlgorithm::sliding_log: return "sliding_log";
  }
  return "?";
}

std::string_view to_string(LimiterBackend b) noexcept {
  switch (b) {
    case LimiterBackend::memory: return "memory";
    case LimiterBackend::redis: return "redis";
    case LimiterBackend::auto_: return "auto";
  }
  return "?";
}

std::string_view to_string(QuotaPeriod p) noexcept {
  switch (p) {
    case QuotaPeriod::minute: return "minute";
    case QuotaPeriod::hour: return "hour";
    case QuotaPeriod::day: return "day";
    case QuotaPeriod::month: return "month";
  }
  return "?";
}

std::string_view to_string(Priority p) noexcept {
  switch (p) {
    case Priority::standard: return "standard";
    case Priority::premium: return "premium";
    case Priority::vip: return "vip";
  }
  return "?";
}

std::optional<Priority> priority_from_name(std::string_view n) noexcept {
  if (n == "standard") return Priority::standard;
  if (n == "premium") return Priority::premium;
  if (n == "vip") return Priority::vip;
  return std::nullopt;
}

std::string_view to_string(HistoryBackend b) noexcept {
  switch (b) {
    case HistoryBackend::none: return "none";
    case HistoryBackend::sqlite: return "sqlite";
    case HistoryBackend::postgres: return "postgres";
  }
  return "?";
}

std::string_view to_string(Provider p) noexcept {
  switch (p) {
    case Provider::simulated: return "simulated";
    case Provider::openai: return "openai";
    case Provider::ollama: return "ollama";
    case Provider::anthropic: return "anthropic";
  }
  return "unknown";
}

std::string_view to_string(CanarySticky s) noexcept {
  switch (s) {
    case CanarySticky::none: return "none";
    case CanarySticky::key: return "key";
    case CanarySticky::user: return "user";
  }
  return "?";
}

std::string_view to_string(Balance b) noexcept {
  switch (b) {
    case Balance::round_robin: return "round_robin";
    case Balance::weighted: return "weighted";
    case Balance::least_connections: return "least_connections";
    case Balance::latency: return "latency";
  }
  return "?";
}

const Route* Config::find_route(std::string_view alias) const noexcept {
  for (const auto& r : routes) {
    if (r.alias == alias) return &r;
  }
  return nullptr;
}

const ApiKey* Config::find_key(std::string_view secret) const noexcept {
  if (secret.empty()) return nullptr;
  for (const auto& k : keys) {
    if (k.key == secret) return &k;
  }
  return nullptr;
}

std::string ConfigError::to_string() const {
  std::string out;
  if (line > 0) out += "line " + std::to_string(line) + ": ";
  if (!key.empty()) out += key + ": ";
  out += message;
  return out;
}

std::optional<std::string> process_env(const char* name) {
  if (const char* v = std::getenv(name)) return std::string(v);
  return std::nullopt;
}

namespace {

std::optional<std::string> read_real_file(const std::string& path, std::string& error) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    error = ec ? ec.message() : "not a regular file";
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = std::strerror(errno);
    return std::nullopt;
  }
  std::string out;
  char buf[65536];
  while (in.read(buf, sizeof buf), in.gcount() > 0) {
    if (out.size() + static_cast<std::size_t>(in.gcount()) > kMaxReadFileBytes) {
      error = "larger than " + std::to_string(kMaxReadFileBytes) + " bytes";
      return std::nullopt;
    }
    out.append(buf, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) {
    error = "read error";
    return std::nullopt;
  }
  return out;
}

bool real_is_regular_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

bool real_is_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

}  // namespace

const FileAccess& real_files() {
  static const FileAccess files{read_real_file, real_is_regular_file, real_is_directory};
  return files;
}

LoadResult load_string(const std::string& yaml, EnvLookup env, const std::string& base_dir, const FileAccess& files) {
  Loader loader(env, fs::path(base_dir.empty() ? "." : base_dir), files);
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    LoadResult res;
    res.errors.push_back(ConfigError{"", e.mark.line < 0 ? 0 : e.mark.line + 1, "invalid YAML: " + e.msg});
    return res;
  }
  try {
    return loader.run(root);
  } catch (const YAML::Exception& e) {
    loader.error("", e.mark.line < 0 ? 0 : e.mark.line + 1, "invalid YAML: " + e.msg);
  } catch (const std::exception& e) {
    loader.error("", 0, std::string("cannot load configuration: ") + e.what());
  }
  LoadResult res;
  res.errors = loader.take_errors();
  return res;
}

LoadResult load_file(const std::string& path, EnvLookup env) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    LoadResult res;
    res.errors.push_back(ConfigError{"", 0, "cannot read config file " + path + ": " + std::strerror(errno)});
    return res;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  fs::path dir = fs::path(path).parent_path();
  return load_string(ss.str(), env, dir.empty() ? std::string(".") : dir.string());
}

std::string describe(const Config& c) {
  std::string out;
  out += "instance:   " + c.instance + "\n";
  out += "listen:     " + host_for_display(c.listen_host) + ":" + std::to_string(c.listen_port) +
         (c.listen_port == 0 ? " (any free port)" : "") + "\n";
  out += "workers:    " + (c.workers == 0 ? std::string("auto (one per core)") : std::to_string(c.workers)) + "\n";
  out += "status:     /metrics and /infra ";
  out += c.public_status ? "public" : "need an admin key";
  if (!c.admin_listen_host.empty()) {
    out += "; admin listener " + host_for_display(c.admin_listen_host) + ":" + std::to_string(c.admin_listen_port) +
           " (no key)";
  }
  out += "\n";
  out += "access log: " + (c.access_log == "-" ? std::string("stdout") : c.access_log.empty() ? std::string("off") : c.access_log) + "\n";
  out += "limits:     body " + std::to_string(c.max_body_bytes) + " B, headers " + std::to_string(c.max_header_bytes) +
         " B, upstream response " +
         std::to_string(c.max_upstream_response_bytes) + " B, pool " + std::to_string(c.upstream_pool_per_host) +
         " per host, connections " + (c.max_connections ? std::to_string(c.max_connections) : std::string("auto")) +
         "\n";
  const auto& t = c.timeouts;
  out += "timeouts:   connect " + fmt_duration(t.connect) + ", first_token " + fmt_duration(t.first_token) + ", idle " +
         fmt_duration(t.idle) + ", total " + fmt_duration(t.total) + ", client_header " + fmt_duration(t.client_header) +
         ", keep_alive " + fmt_duration(t.keep_alive) +
         ", client_first_byte " + fmt_duration(t.client_first_byte) + ", heartbeat " + fmt_duration(t.heartbeat) +
         ", client_write " + fmt_duration(t.client_write) +
         ", shutdown_grace " + fmt_duration(t.shutdown_grace) + "\n";
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
  {
    const auto& rs = c.routing;
    const auto& h = rs.health;
    out += "routing:    ";
    if (h.interval.count() == 0) {
      out += "probes off";
    } else {
      out += "probes every " + fmt_duration(h.interval) + " (timeout " + fmt_duration(h.timeout) + ", unhealthy after " +
             std::to_string(h.unhealthy_after) + ", healthy after " + std::to_string(h.healthy_after) + ")";
    }
    if (h.eject_after == 0) out += ", no ejection";
    else out += ", eject after " + std::to_string(h.eject_after) + " failures for " + fmt_duration(h.eject_for);
    auto breaker = [](std::string_view label, const BreakerConfig& b) {
      std::string s(label);
      if (!b.enabled) return s + " off";
      return s + " error_rate " + fmt_num(b.error_rate) + " min_requests " + std::to_string(b.min_requests) +
             " p95_ttft " + (b.p95_ttft.count() ? fmt_duration(b.p95_ttft) : std::string("off")) + " window " +
             fmt_duration(b.window) + " open_for " + fmt_duration(b.open_for);
    };
    out += ", " + breaker("breaker", rs.breaker) + ", " + breaker("provider breaker", rs.provider_breaker);
    if (!rs.webhook_url.empty()) {
      Backend parsed;
      check_webhook_url(rs.webhook_url, parsed);  // valid: checked at load
      out += ", webhook " + host_for_display(parsed.host);
    }
    out += "\n";
  }
  out += "keys (" + std::to_string(c.keys.size()) + "):\n";
  for (const auto& k : c.keys) {
    out += "  " + k.name + " tenant=" + k.tenant + " tier=" + k.tier + " models=";
    for (size_t i = 0; i < k.models.size(); ++i) out += (i ? "," : "") + k.models[i];
    if (k.admin) out += " admin";
    out += " key=" + sluice::mask_key(k.key) + "\n";
  }
  const auto& rl = c.rate_limits;
  if (rl.any()) {
    out += "rate limits: backend " + std::string(to_string(rl.backend));
    if (rl.backend != LimiterBackend::memory) {
      auto ep = parse_redis_url(c.redis.url);  // valid: checked at load
      const std::string url = ep ? sluice::describe(*ep) : c.redis.url;
      out += " (" + url + ", on_redis_down " + (rl.on_redis_down == DownPolicy::closed ? "closed" : "open") + ")";
    }
    out += ", " + std::to_string(rl.requests.size()) + " request limits, " + std::to_string(rl.tokens.size()) +
           " token limits\n";
  } else {
    out += "rate limits: none\n";
  }
  const auto& cc = c.concurrency;
  out += "concurrency: per key " + (cc.per_key ? std::to_string(cc.per_key) : std::string("unlimited")) + ", queue " +
         std::to_string(cc.queue_size) + ", max wait vip " + fmt_duration(cc.max_wait[2]) + " premium " +
         fmt_duration(cc.max_wait[1]) + " standard " + fmt_duration(cc.max_wait[0]) + "\n";
  out += "params:     " + std::to_string(c.params.size()) + " checked, options: " + std::to_string(c.options.size()) +
         " allowed\n";
  return out;
}

}  // namespace sluice::config
