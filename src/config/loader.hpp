#pragma once
// Internal to the config library: the YAML walker every section reads through. It
// collects every error with its key path and 1-based line, refuses unknown and repeated
// keys, and holds what the cross checks of validate() need (where things were written).
// The sections themselves live in sections/*.cpp, each with the table of its keys
// (schema.hpp).
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/checks.hpp"
#include "config/config.hpp"

namespace sluice::config::detail {

namespace fs = std::filesystem;

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

struct LimitFilter {
  std::string path;
  int line;
  std::string field;  // key, tier, tenant, model
  std::string value;
};

std::string join(const std::string& path, std::string_view key);
std::string index(const std::string& path, size_t i);
int mark_line(const YAML::Node& n);
const char* kind_of(const YAML::Node& n);
bool is_postgres_url(std::string_view u);

class Loader {
 public:
  Loader(EnvLookup env, fs::path base_dir, const FileAccess& files)
      : env_(env), base_dir_(std::move(base_dir)), files_(files) {}

  LoadResult run(const YAML::Node& root);
  void error(std::string key, int line, std::string msg) {
    errors_.push_back(ConfigError{std::move(key), line, std::move(msg)});
  }
  // An error at `n`, with the keys file's suffix while one is read.
  void fail(const std::string& path, const YAML::Node& n, const std::string& msg) {
    error(path, line_of(n), msg + std::string(suffix_));
  }
  std::vector<ConfigError> take_errors() { return std::move(errors_); }
  std::size_t error_count() const { return errors_.size(); }

  // Reads a map's keys: unknown and repeated keys are errors; known ones land in `out`.
  bool fields(const YAML::Node& n, const std::string& path, std::initializer_list<std::string_view> known,
              Fields& out) {
    return fields(n, path, std::span<const std::string_view>(known.begin(), known.end()), out);
  }
  bool fields(const YAML::Node& n, const std::string& path, std::span<const std::string_view> known, Fields& out);
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
  bool get_int(const YAML::Node& n, const std::string& path, long long lo, long long hi, T& out) {
    std::string s;
    if (!scalar(n, path, "an integer", s)) return false;
    long long v = 0;
    if (!report(check_int(trim(s), lo, hi, v), path, n)) return false;
    out = static_cast<T>(v);
    return true;
  }
  bool get_double(const YAML::Node& n, const std::string& path, double lo, double hi, double& out);
  bool get_bool(const YAML::Node& n, const std::string& path, bool& out);
  bool get_duration(const YAML::Node& n, const std::string& path, Millis min, Millis& out);
  bool get_priority(const YAML::Node& n, const std::string& path, Priority& out);
  // "auto" (-1) or a count from 0 (off) to `max`.
  bool get_lease(const YAML::Node& n, const std::string& path, long long max, std::int64_t& out);
  std::optional<std::string> getenv(const std::string& name) const {
    auto v = env_ ? env_(name.c_str()) : std::nullopt;
    if (v && v->empty()) return std::nullopt;
    return v;
  }
  std::optional<std::string> getenv_raw(const std::string& name) const {
    return env_ ? env_(name.c_str()) : std::nullopt;
  }
  // While an environment override is read: a relative path in it stays relative to the
  // working directory (base_dir() is empty).
  struct EnvScope {
    Loader& l;
    fs::path saved;
    explicit EnvScope(Loader& loader) : l(loader), saved(std::exchange(loader.base_dir_, fs::path())) {}
    ~EnvScope() { l.base_dir_ = std::move(saved); }
  };
  // A path in the file, relative to the file's directory.
  std::string resolve_path(const std::string& p) const;
  const fs::path& base_dir() const { return base_dir_; }
  const FileAccess& files() const { return files_; }

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

  // State the sections share with the cross checks.
  std::string_view suffix_;          // appended to messages (" (in keys.yaml)")
  std::vector<KeyOrigin> key_origins_;
  std::vector<RouteOrigin> route_origins_;
  std::vector<LimitFilter> limit_filters_;
  int reservation_ttl_line_ = 0;  // where rate_limits.reservation_ttl was set
  int models_line_ = 0;            // where `models` is (0: absent)
  Config* config_ = nullptr;       // the configuration being read

 private:
  void validate(Config& c);

  EnvLookup env_;
  fs::path base_dir_;
  const FileAccess& files_;
  std::vector<ConfigError> errors_;
  // yaml-cpp marks an empty value ("workers:") at the next token, often the next line;
  // such values are reported at their key's line instead. Indexed by the node's mark (its
  // position in the text; yaml-cpp gives no other handle on a node's identity), then
  // matched by identity: a scan of every empty value per lookup made a file with many
  // of them load in quadratic time (20,000 keys with empty fields: 34 s).
  std::unordered_multimap<int, std::pair<YAML::Node, int>> null_lines_;
};

// ---------------------------------------------------------------------------------------
// The sections (sections/*.cpp). Each reads its part of the file through its table, adds
// its environment overrides, checks what spans its own keys after everything is read,
// and describes itself in the startup banner.

// server.cpp: the top level (instance, listen, workers, access_log, tokenizer_dir,
// data_dir, and which section each other key belongs to), limits, timeouts, admin.
void read_root(Loader& l, const YAML::Node& root, Config& c);
void server_env(Loader& l, Config& c);
std::string describe_server(const Config& c);

// keys.cpp
void read_keys(Loader& l, const YAML::Node& n, const std::string& path, Config& c);
void read_keys_file(Loader& l, const YAML::Node& n, Config& c);
void keys_env(Loader& l, Config& c);
// Unique names and secrets, models naming routes; fills `names` (key name -> index).
void check_keys(Loader& l, const Config& c, const std::unordered_map<std::string_view, size_t>& aliases,
                std::unordered_map<std::string_view, size_t>& names);
std::string describe_keys(const Config& c);

// models.cpp: routes, backends, sim, canary.
void read_models(Loader& l, const YAML::Node& n, Config& c);
// At least one route, unique aliases (fills `aliases`).
void check_models(Loader& l, Config& c, std::unordered_map<std::string_view, size_t>& aliases);
// Default backend names, backends shared by routes, fallbacks and canaries.
void check_backend_names(Loader& l, Config& c, const std::unordered_map<std::string_view, size_t>& aliases);
std::string describe_models(const Config& c);

// params.cpp: params and options.
void read_ranges(Loader& l, const YAML::Node& n, const std::string& path, Ranges& out);
Ranges default_params();
Ranges default_options();
std::string describe_params(const Config& c);

// routing.cpp
void read_routing(Loader& l, const YAML::Node& n, Config& c);
void read_breaker(Loader& l, const YAML::Node& n, const std::string& path, BreakerConfig& b);
// Within a route (its alias's place goes to the route's origin).
void read_canary(Loader& l, const YAML::Node& n, const std::string& path, CanaryConfig& cc);
std::string describe_routing(const Config& c);

// admission.cpp: redis, rate_limits, concurrency.
void read_redis(Loader& l, const YAML::Node& n, Config& c);
void read_rate_limits(Loader& l, const YAML::Node& n, Config& c);
void read_concurrency(Loader& l, const YAML::Node& n, Config& c);
void redis_env(Loader& l, Config& c);
void rate_limits_env(Loader& l, Config& c);
void check_admission(Loader& l, Config& c, const std::unordered_map<std::string_view, size_t>& aliases,
                     const std::unordered_map<std::string_view, size_t>& names);
// Derived values (burst, lease, reservation_ttl, on_redis_down) and their checks.
void check_rate_limits(Loader& l, Config& c);
std::string describe_admission(const Config& c);

// records.cpp: history and events.
void read_history(Loader& l, const YAML::Node& n, Config& c);
void read_events(Loader& l, const YAML::Node& n, Config& c);
void records_env(Loader& l, Config& c);
void check_records(Loader& l, Config& c);

// guardrails.cpp: the screening policies; that routes and keys name existing ones.
void read_guardrails(Loader& l, const YAML::Node& n, Config& c);
void check_guardrails(Loader& l, Config& c);
void check_cache(Loader& l, Config& c);
void read_key_store(Loader& l, const YAML::Node& n, Config& c);
void key_store_env(Loader& l, Config& c);
void check_key_store(Loader& l, const Config& c);

// cache.cpp: the response cache and a route's use of it.
void read_cache(Loader& l, const YAML::Node& n, Config& c);
void read_route_cache(Loader& l, const YAML::Node& n, const std::string& path, RouteCache& rc);

}  // namespace sluice::config::detail
