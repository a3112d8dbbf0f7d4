#pragma once
// The fleet's runtime state (docs/admin.md), kept in the history's database
// (history::ControlTable) and polled by a thread of its own, so that a change made on any
// instance is in force here within key_store.poll:
//   keys     GET /admin/keys (every key: the file's, read-only, and the store's);
//            POST /admin/keys (a new key: 201 with its secret, shown this once);
//            GET | PATCH | DELETE /admin/keys/<name>; POST /admin/keys/<name>/disable |
//            enable | rotate
//   drains   GET /admin/backends; POST /admin/backends/<name>/drain | undrain
//   canaries POST /admin/routes/<alias>/canary {"weight": 0..100 | null}
// The request path never waits for the database: keys are found in the set in force
// (keys::Registry) and drains are flags on the backends, both replaced when the database
// changed. While it is down they stay as last read.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config/config.hpp"
#include "gateway/reconcile.hpp"  // ReconcileAnswer
#include "keys/keys.hpp"

namespace sluice::history {
class ControlTable;
}

namespace sluice::gateway {

class ControlNotify;

class ControlStore {
 public:
  // Called with what the database holds whenever it was read anew (from the poll thread or
  // an admin call): the gateway installs the file's keys with the stored ones, and marks
  // the drained backends.
  struct Install {
    std::function<void(std::vector<keys::Stored>)> keys;
    std::function<void(std::unordered_set<std::string>)> drains;
    std::function<void(std::unordered_map<std::string, double>)> canaries;  // weights by alias
  };
  // What a key may name, as the running gateway knows it.
  struct Names {
    std::function<bool(std::string_view)> alias;       // a routed model alias
    std::function<bool(std::string_view)> guardrails;  // a guardrails policy
    std::function<std::shared_ptr<const keys::KeySet>()> in_force;  // the keys in force
  };

  // Throws std::runtime_error for settings that can never work.
  ControlStore(const config::Config& cfg, std::shared_ptr<const keys::Hasher> hasher, Install install, Names names);
  ~ControlStore();  // stops the poll thread
  ControlStore(const ControlStore&) = delete;
  ControlStore& operator=(const ControlStore&) = delete;

  // Reads the store now if its version moved (blocking; the poll thread's step).
  void sync();

  // One /admin/keys request (blocking: on the query thread). `rest` is the path after
  // /admin/keys; `current` the keys in force (the file's are read-only); `by` the key
  // making the request (writes need role admin).
  ReconcileAnswer handle(std::string_view method, std::string_view rest, std::string_view body,
                         const keys::KeySet& current, const config::ApiKey& by);
  // A checked drain or undrain of a backend, and a canary's weight (< 0: back to the
  // configured one), written for the fleet (blocking, as handle()). Reason ok with an
  // empty body when done; else why not (the database down).
  ReconcileAnswer drain(std::string_view backend, bool drain, const config::ApiKey& by);
  ReconcileAnswer set_canary(std::string_view alias, double weight, const config::ApiKey& by);

  // The "key_store" object of /infra.
  std::string status_json() const;

 private:
  void run();
  // A write is done: read it here, and tell the others (Redis pub/sub).
  void committed();
  // The stored keys used since the last report: their last_used_ms in the store.
  void report_use();

  const config::Config& cfg_;
  std::shared_ptr<const keys::Hasher> hasher_;
  Install install_;
  Names names_;
  std::unique_ptr<history::ControlTable> table_;
  std::unique_ptr<ControlNotify> notify_;  // key_store.notify: redis
  std::mutex sync_mu_;          // one read of the store at a time
  std::int64_t version_ = -1;   // the version last installed (under sync_mu_)
  std::atomic<std::int64_t> installed_version_{-1}, keys_{0}, drains_{0}, syncs_{0}, last_sync_ms_{0};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sluice::gateway
