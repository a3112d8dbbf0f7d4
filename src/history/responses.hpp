#pragma once
// Stored responses of the Responses API in the history's database (responses.store:
// database): a table of their own (migration 3), read and written by this table's own
// connection. Blocking calls: the caller makes them off the workers, one at a time (the
// conversations store's thread). A failed call drops the connection; the next one opens
// it again, at most once per retry_interval.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::config {
struct HistorySettings;
}

namespace sluice::history {

struct StoredRow {
  std::string response, items;
  std::int64_t input_from = 0, input_count = 0;
};

class ResponseTable {
 public:
  // nullptr with `error` for settings that can never work (history backend none).
  static std::unique_ptr<ResponseTable> create(const config::HistorySettings& settings, std::string* error);
  ~ResponseTable();

  // The tenant's row, unexpired at now_ms; nullopt when the database failed (see error()).
  std::optional<std::optional<StoredRow>> get(std::string_view tenant, std::string_view id, std::int64_t now_ms);
  // Written (replacing one of the same id) until expires_ms; false when the database
  // failed. Now and then, expired rows are deleted too (a bounded number per call).
  bool put(std::string_view tenant, std::string_view id, const StoredRow& row, std::int64_t expires_ms,
           std::int64_t now_ms);
  // Whether it was there; nullopt when the database failed.
  std::optional<bool> erase(std::string_view tenant, std::string_view id);

  bool up() const;
  std::string error() const;  // the last failure's ("" when the last call succeeded)

 private:
  struct Impl;
  explicit ResponseTable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::history
