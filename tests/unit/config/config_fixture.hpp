#pragma once
// Shared by the config tests: a fake environment the loader reads, and a fixture that
// loads YAML through it and finds errors by key.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "config/config.hpp"

namespace sluice::config::testing {

// Tests fill fake_env_vars(); the loader reads it through fake_env.
inline std::map<std::string, std::string>& fake_env_vars() {
  static std::map<std::string, std::string> vars;
  return vars;
}

inline std::optional<std::string> fake_env(const char* name) {
  auto& vars = fake_env_vars();
  auto it = vars.find(name);
  if (it == vars.end()) return std::nullopt;
  return it->second;
}

class ConfigFixture : public ::testing::Test {
 protected:
  void SetUp() override { fake_env_vars().clear(); }
  void TearDown() override { fake_env_vars().clear(); }

  static LoadResult load(const std::string& yaml, const std::string& base_dir = ".") {
    return load_string(yaml, fake_env, base_dir);
  }

  static std::string all_errors(const LoadResult& r) {
    std::string all;
    for (const auto& e : r.errors) all += e.to_string() + "\n";
    return all;
  }

  // The first error whose key is `key` (fails the test if there is none).
  static ConfigError error_at(const LoadResult& r, const std::string& key) {
    for (const auto& e : r.errors) {
      if (e.key == key) return e;
    }
    ADD_FAILURE() << "no error for key '" << key << "'; errors:\n" << all_errors(r);
    return {};
  }
};

}  // namespace sluice::config::testing
