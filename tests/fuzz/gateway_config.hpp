#pragma once
// The configuration the parsers see in the fuzz targets: what the loader makes of the
// smallest config (one route; the built-in params/options allow-lists), with no
// environment and no files.
#include <optional>
#include <string>

#include "config/config.hpp"

namespace sluice::fuzz {

inline std::optional<std::string> no_env(const char*) { return std::nullopt; }

inline std::optional<std::string> no_file(const std::string& path, std::string& error) {
  error = "the fuzz target reads no files";
  return std::nullopt;
}
inline bool no_path(const std::string&) { return false; }
inline const config::FileAccess kNoFiles{no_file, no_path, no_path};
inline const char* const kNoDir = "/nonexistent-sluice-fuzz";

inline const config::Config& gateway_config() {
  static const config::Config cfg = [] {
    auto r = config::load_string("models:\n  - alias: demo\n    provider: simulated\n", no_env, kNoDir, kNoFiles);
    if (!r.ok()) {
      for (const auto& e : r.errors) std::fprintf(stderr, "default config: %s\n", e.to_string().c_str());
      std::abort();
    }
    return *r.config;
  }();
  return cfg;
}

}  // namespace sluice::fuzz
