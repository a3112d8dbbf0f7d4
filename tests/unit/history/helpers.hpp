#pragma once
// Shared by the history tests: records with known values, waiting for a condition, temp
// dirs, and the JSON the queries answer.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "history/history.hpp"

namespace sluice::test {

// Polls `done` until it holds or `limit` passes; the caller asserts on the result.
inline bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/sluice-history-XXXXXX";
    if (::mkdtemp(tmpl)) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A request with the fields the filters and stats read; the string_view fields point to
// literals, as they point to the configuration in the gateway.
inline telemetry::RequestRecord record(std::int64_t unix_ms, std::string_view model, std::string_view key, int status,
                                       double wall_ms, double ttft_ms = -1) {
  telemetry::RequestRecord r;
  r.unix_ms = unix_ms;
  r.request_id = "req-" + std::to_string(unix_ms);
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.key_name = key;
  r.tenant = key == "team-a" ? "alpha" : "beta";
  r.tier = "standard";
  r.alias = std::string(model);
  r.model = model;
  r.provider = "ollama";
  r.backend = "127.0.0.1:11434";
  r.status = status;
  r.wall_ms = wall_ms;
  r.ttft_ms = ttft_ms;
  r.instance = "test";
  return r;
}

inline std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The query's JSON answer; fails the test (and returns null) on an error.
inline boost::json::value list_json(const history::History& h, std::string_view query_string) {
  std::string error;
  auto q = history::parse_list_query(query_string, error);
  EXPECT_TRUE(q) << query_string << ": " << error;
  if (!q) return nullptr;
  auto r = h.list(*q);
  EXPECT_TRUE(r.ok()) << query_string << ": " << r.error;
  return r.ok() ? boost::json::parse(r.body) : boost::json::value(nullptr);
}

inline boost::json::value stats_json(const history::History& h, const history::StatsQuery& q) {
  auto r = h.stats(q);
  EXPECT_TRUE(r.ok()) << r.error;
  return r.ok() ? boost::json::parse(r.body) : boost::json::value(nullptr);
}

}  // namespace sluice::test
