// Configuration loading: YAML (yaml-cpp) + environment overrides, validated as a whole.
// Every problem is collected (with its key path and 1-based line) before giving up, so
// one run of `sluice serve` shows all mistakes at once. The sections, each with the table
// of its keys, are in sections/*.cpp; this file holds the walker they share and the order
// in which they are read, overridden, checked and described.
#include "config/loader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace sluice::config {

namespace detail {

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

// std::span, not std::ranges::subrange: clang 14 rejects libstdc++ 12's subrange.
bool Loader::fields(const YAML::Node& n, const std::string& path, std::span<const std::string_view> known,
                    Fields& out) {
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

std::string Loader::resolve_path(const std::string& p) const {
  if (p.empty() || p == "-") return p;
  fs::path path(p);
  if (path.is_relative()) path = base_dir_ / path;
  return path.lexically_normal().string();
}

void Loader::validate(Config& c) {
  check_records(*this, c);
  std::unordered_map<std::string_view, size_t> aliases, names;
  check_models(*this, c, aliases);
  check_keys(*this, c, aliases, names);
  check_admission(*this, c, aliases, names);
  check_backend_names(*this, c, aliases);
  check_rate_limits(*this, c);
  check_guardrails(*this, c);
  check_cache(*this, c);
  check_key_store(*this, c);
}

LoadResult Loader::run(const YAML::Node& root) {
  auto c = std::make_shared<Config>();
  config_ = c.get();
  read_root(*this, root, *c);

  // Environment overrides, each section's in turn.
  server_env(*this, *c);
  redis_env(*this, *c);
  records_env(*this, *c);
  rate_limits_env(*this, *c);
  keys_env(*this, *c);
  key_store_env(*this, *c);
  validate(*c);

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

}  // namespace detail

namespace fs = detail::fs;

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
  detail::Loader loader(env, fs::path(base_dir.empty() ? "." : base_dir), files);
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
  return detail::describe_server(c) + detail::describe_models(c) + detail::describe_routing(c) +
         detail::describe_keys(c) + detail::describe_admission(c) + detail::describe_params(c);
}

}  // namespace sluice::config
