// SQLite: a file in WAL mode, so readers (the queries, on their own read-only connection)
// never wait for the writer and the writer never waits for them.
#include <sqlite3.h>

#include <filesystem>

#include "history/db.hpp"

namespace sluice::history {
namespace {

constexpr int kBusyTimeoutMs = 5000;

class SqliteConnection final : public Connection {
 public:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}
  ~SqliteConnection() override {
    sqlite3_finalize(insert_);
    sqlite3_close_v2(db_);
  }

  Dialect dialect() const noexcept override { return Dialect::sqlite; }

  std::string exec(const std::string& sql) override {
    char* msg = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &msg) == SQLITE_OK) return "";
    std::string e = msg ? msg : sqlite3_errmsg(db_);
    sqlite3_free(msg);
    return e;
  }

  std::string query(const std::string& sql, const std::vector<Value>& params, const RowFn& on_row) override {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), static_cast<int>(sql.size()), &stmt, nullptr) != SQLITE_OK) return error();
    std::string e;
    for (std::size_t i = 0; i < params.size() && e.empty(); ++i) e = bind(stmt, static_cast<int>(i) + 1, params[i]);
    std::vector<Value> row;
    while (e.empty()) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) {
        e = error();
        break;
      }
      if (!on_row) continue;
      const int n = sqlite3_column_count(stmt);
      row.assign(static_cast<std::size_t>(n), Value{});
      for (int i = 0; i < n; ++i) {
        switch (sqlite3_column_type(stmt, i)) {
          case SQLITE_INTEGER: row[static_cast<std::size_t>(i)] = std::int64_t{sqlite3_column_int64(stmt, i)}; break;
          case SQLITE_FLOAT: row[static_cast<std::size_t>(i)] = sqlite3_column_double(stmt, i); break;
          case SQLITE_NULL: break;
          default:
            row[static_cast<std::size_t>(i)] = std::string(reinterpret_cast<const char*>(sqlite3_column_text(stmt, i)),
                                                           static_cast<std::size_t>(sqlite3_column_bytes(stmt, i)));
        }
      }
      on_row(row);
    }
    sqlite3_finalize(stmt);
    return e;
  }

  std::string insert(std::span<const Row> rows) override {
    if (!insert_) {
      std::string sql = "INSERT INTO requests (", values;
      int n = 0;
      for (const auto& c : columns()) {
        const std::string_view sep = n++ ? ", " : "";
        sql += std::string(sep) + std::string(c.name);
        values += std::string(sep) + placeholder(Dialect::sqlite, n);
      }
      sql += ") VALUES (" + values + ")";
      if (sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &insert_, nullptr) != SQLITE_OK) {
        return error();
      }
    }
    if (auto e = exec("BEGIN IMMEDIATE"); !e.empty()) return e;
    std::string e;
    for (const Row& r : rows) {
      int i = 0;
      for (const auto& c : columns()) {
        if (e = bind(insert_, ++i, value_of(r, c)); !e.empty()) break;
      }
      if (e.empty() && sqlite3_step(insert_) != SQLITE_DONE) e = error();
      sqlite3_reset(insert_);
      if (!e.empty()) break;
    }
    sqlite3_clear_bindings(insert_);
    if (e.empty()) e = exec("COMMIT");
    if (!e.empty()) exec("ROLLBACK");
    return e;
  }

 private:
  std::string error() const { return sqlite3_errmsg(db_); }

  std::string bind(sqlite3_stmt* stmt, int i, const Value& v) {
    int rc = SQLITE_OK;
    if (auto* n = std::get_if<std::int64_t>(&v)) rc = sqlite3_bind_int64(stmt, i, *n);
    else if (auto* d = std::get_if<double>(&v)) rc = sqlite3_bind_double(stmt, i, *d);
    else if (auto* s = std::get_if<std::string>(&v))
      rc = sqlite3_bind_text(stmt, i, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
    else rc = sqlite3_bind_null(stmt, i);
    return rc == SQLITE_OK ? "" : error();
  }

  sqlite3* db_;
  sqlite3_stmt* insert_ = nullptr;  // prepared once, reused for every row
};

}  // namespace

std::unique_ptr<Connection> open_sqlite(const std::string& path, bool read_only, std::string& error) {
  if (!read_only) {
    std::error_code ec;
    const auto dir = std::filesystem::path(path).parent_path();
    if (!dir.empty() && !std::filesystem::exists(dir, ec) && !std::filesystem::create_directories(dir, ec) && ec) {
      error = "cannot create " + dir.string() + ": " + ec.message();
      return nullptr;
    }
  }
  sqlite3* db = nullptr;
  const int flags = (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    error = path + ": " + (db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close_v2(db);
    return nullptr;
  }
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  auto c = std::make_unique<SqliteConnection>(db);
  // WAL: readers and the writer do not block each other; NORMAL: a commit does not wait
  // for fsync (a power loss may lose the last batches, never corrupt the file).
  if (!read_only) {
    if (auto e = c->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL"); !e.empty()) {
      error = path + ": " + e;
      return nullptr;
    }
  }
  return c;
}

}  // namespace sluice::history
