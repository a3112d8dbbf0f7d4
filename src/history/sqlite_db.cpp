// SQLite: a file in WAL mode, so readers (the queries, on their own read-only connection)
// never wait for the writer and the writer never waits for them.
#include <sqlite3.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <type_traits>

#include "history/db.hpp"

namespace sluice::history {
namespace {

constexpr int kBusyTimeoutMs = 5000;

class SqliteConnection final : public Connection {
 public:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}
  ~SqliteConnection() override {
    for (auto& shape : shapes_)
      for (auto& ins : shape.inserts) sqlite3_finalize(ins.stmt);
    for (auto* stmt : {begin_, commit_}) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);
  }

  Dialect dialect() const noexcept override { return Dialect::sqlite; }

  std::string exec(const std::string& sql) override {
    char* msg = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &msg) == SQLITE_OK) return "";
    last_code_ = sqlite3_errcode(db_);
    std::string e = msg ? msg : sqlite3_errmsg(db_);
    sqlite3_free(msg);
    return e;
  }

  // No client-side limit here: a statement runs until it ends (or waits the busy timeout).
  std::string exec_long(const std::string& sql, std::chrono::milliseconds) override { return exec(sql); }

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

  // One transaction; rows go through prepared multi-row INSERTs of 32, 16, 8, 4, 2 and 1
  // rows (a statement's own work, its cursors, its statement journal and its end, is
  // then paid once per 32 rows, and at most five more times for the rest of a batch).
  // A column that is NULL in every row of the batch (most request options, usually) is
  // left out of the INSERT: SQLite stores its NULL without a parameter to bind or copy.
  // Statements are prepared once per connection and set of columns left out (a few sets
  // are kept), BEGIN and COMMIT once.
  std::string insert(std::span<const Row> rows) override {
    last_code_ = SQLITE_OK;
    if (!begin_ || !commit_) {
      std::string e = prepare("BEGIN IMMEDIATE", begin_);
      if (e.empty()) e = prepare("COMMIT", commit_);
      if (!e.empty()) return e;  // finalized at the next try or with the connection
    }
    Shape* shape = nullptr;
    if (auto e = shape_for(null_columns(rows), shape); !e.empty()) return e;
    if (auto e = run(begin_); !e.empty()) return e;
    std::string e;
    std::size_t at = 0;
    for (std::size_t k = kSizes; k-- > 0 && e.empty();) {
      if (!shape->inserts[k].stmt) continue;
      const std::size_t n = std::size_t{1} << k;
      for (; e.empty() && rows.size() - at >= n; at += n) e = insert_rows(*shape, shape->inserts[k], rows.subspan(at, n));
    }
    // No pointer into the rows stays bound (each step rebinds every text parameter before).
    for (auto& ins : shape->inserts) {
      if (!ins.stmt) continue;
      sqlite3_clear_bindings(ins.stmt);
      std::fill(ins.bound.begin(), ins.bound.end(), Bound{});
    }
    if (e.empty()) e = run(commit_);
    if (!e.empty()) {
      const int code = last_code_;  // the failure's, not the ROLLBACK's
      exec("ROLLBACK");
      last_code_ = code;
    }
    return e;
  }

  bool refused_for_content() const noexcept override {
    const int primary = last_code_ & 0xff;
    return primary == SQLITE_CONSTRAINT || primary == SQLITE_MISMATCH || primary == SQLITE_TOOBIG;
  }

 private:
  // What a parameter holds since its last bind (sqlite3_reset keeps bindings): a NULL, an
  // integer or a double that the next row binds again is left as it is. Text is always
  // bound (it points into the row).
  struct Bound {
    enum Kind : std::uint8_t { null, integer, real, text } kind = null;
    std::uint64_t bits = 0;
  };
  struct Insert {
    sqlite3_stmt* stmt = nullptr;
    std::vector<Bound> bound;  // per parameter
  };
  static constexpr std::size_t kSizes = 6;  // statements of 1, 2, 4, 8, 16, 32 rows (1056 parameters)
  // The INSERTs of one set of columns left out (bit i: columns()[i]).
  struct Shape {
    std::uint64_t omitted = 0;
    Insert inserts[kSizes];  // inserts[k]: 2^k rows
    std::uint64_t used = 0;  // when last used (for replacing the least recent)
  };
  static constexpr std::size_t kMaxShapes = 4;

  // The nullable columns that are NULL in every row.
  static std::uint64_t null_columns(std::span<const Row> rows) {
    if (columns().size() > 64) return 0;  // (33 today) a wider table is always written whole
    std::uint64_t all = 0;
    std::size_t i = 0;
    for (const Column& c : columns()) {
      if (c.nullable) all |= std::uint64_t{1} << i;
      ++i;
    }
    std::uint64_t nulls = all;
    for (const Row& r : rows) {
      std::uint64_t bit = 1;
      for_each_value(r, [&](const Column&, const auto& v) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) nulls &= ~bit;
        bit <<= 1;
      });
      if (nulls == 0) break;
    }
    return nulls;
  }

  // The statements for `omitted`, prepared on first use; a fifth set replaces the least
  // recently used one.
  std::string shape_for(std::uint64_t omitted, Shape*& out) {
    ++uses_;
    for (auto& sh : shapes_) {
      if (sh.omitted == omitted) {
        sh.used = uses_;
        out = &sh;
        return "";
      }
    }
    Shape fresh;
    fresh.omitted = omitted;
    fresh.used = uses_;
    const std::size_t kept = columns().size() - static_cast<std::size_t>(std::popcount(omitted));
    // As many rows as the build's parameter limit allows (32766 by default, 999 before 3.32).
    const auto max_params = static_cast<std::size_t>(sqlite3_limit(db_, SQLITE_LIMIT_VARIABLE_NUMBER, -1));
    std::string e;
    for (std::size_t k = 0; k < kSizes && e.empty(); ++k) {
      if ((std::size_t{1} << k) * kept > max_params) continue;
      e = prepare_insert(std::size_t{1} << k, omitted, fresh.inserts[k].stmt);
      fresh.inserts[k].bound.assign((std::size_t{1} << k) * kept, Bound{});
    }
    if (!e.empty()) {
      for (auto& ins : fresh.inserts) sqlite3_finalize(ins.stmt);
      return e;
    }
    if (shapes_.size() < kMaxShapes) {
      shapes_.push_back(std::move(fresh));
      out = &shapes_.back();
      return "";
    }
    auto oldest = std::min_element(shapes_.begin(), shapes_.end(),
                                   [](const Shape& x, const Shape& y) { return x.used < y.used; });
    for (auto& ins : oldest->inserts) sqlite3_finalize(ins.stmt);
    *oldest = std::move(fresh);
    out = &*oldest;
    return "";
  }

  // The connection's last error, remembered for refused_for_content().
  std::string error() const {
    last_code_ = sqlite3_errcode(db_);
    return sqlite3_errmsg(db_);
  }

  std::string prepare(const std::string& sql, sqlite3_stmt*& stmt) {
    sqlite3_finalize(stmt);  // of an earlier try that failed further on (no-op on nullptr)
    stmt = nullptr;
    if (sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) != SQLITE_OK) return error();
    return "";
  }

  std::string prepare_insert(std::size_t rows, std::uint64_t omitted, sqlite3_stmt*& stmt) {
    std::string sql = "INSERT INTO requests (";
    std::size_t kept = 0;
    for (std::size_t i = 0; i < columns().size(); ++i) {
      if (omitted >> i & 1) continue;
      if (kept++) sql += ", ";
      sql += columns()[i].name;
    }
    sql += ") VALUES ";
    int n = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      sql += r ? ", (" : "(";
      for (std::size_t k = 0; k < kept; ++k) sql += (k ? ", " : "") + placeholder(Dialect::sqlite, ++n);
      sql += ')';
    }
    return prepare(sql, stmt);
  }

  // A statement without parameters or rows (BEGIN, COMMIT), reusable.
  std::string run(sqlite3_stmt* stmt) {
    const int rc = sqlite3_step(stmt);
    sqlite3_reset(stmt);
    return rc == SQLITE_DONE ? "" : error();
  }

  // Binds rows.size() rows in place (SQLITE_STATIC: the rows outlive the step, and
  // nothing is copied), steps once.
  std::string insert_rows(const Shape& shape, Insert& ins, std::span<const Row> rows) {
    sqlite3_stmt* stmt = ins.stmt;
    Bound* bound = ins.bound.data();
    int i = 0, rc = SQLITE_OK;
    for (const Row& r : rows) {
      std::uint64_t bit = 1;
      for_each_value(r, [&](const Column&, const auto& v) {
        using T = std::decay_t<decltype(v)>;
        const bool omitted = (shape.omitted & bit) != 0;
        bit <<= 1;
        if (omitted) return;  // NULL in every row of the batch: not in the statement
        Bound& b = bound[i++];
        if (rc != SQLITE_OK) return;
        if constexpr (std::is_same_v<T, std::monostate>) {
          if (b.kind == Bound::null) return;
          rc = sqlite3_bind_null(stmt, i);
          b.kind = Bound::null;
        } else if constexpr (std::is_same_v<T, std::string_view>) {
          rc = sqlite3_bind_text(stmt, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
          b.kind = Bound::text;
        } else if constexpr (std::is_same_v<T, double>) {
          std::uint64_t bits;
          std::memcpy(&bits, &v, sizeof bits);
          if (b.kind == Bound::real && b.bits == bits) return;
          rc = sqlite3_bind_double(stmt, i, v);
          b = {Bound::real, bits};
        } else {
          const auto n = static_cast<sqlite3_int64>(v);  // int64, bool as 0/1
          if (b.kind == Bound::integer && b.bits == static_cast<std::uint64_t>(n)) return;
          rc = sqlite3_bind_int64(stmt, i, n);
          b = {Bound::integer, static_cast<std::uint64_t>(n)};
        }
      });
    }
    std::string e;
    if (rc != SQLITE_OK) {
      // What a failed bind left is unknown: everything is bound again next time.
      std::fill(ins.bound.begin(), ins.bound.end(), Bound{Bound::text, 0});
      e = error();
    } else if (sqlite3_step(stmt) != SQLITE_DONE) {
      e = error();
    }
    sqlite3_reset(stmt);
    return e;
  }

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
  // Prepared once per connection (and set of columns left out), reused for every batch.
  std::vector<Shape> shapes_;
  std::uint64_t uses_ = 0;
  sqlite3_stmt *begin_ = nullptr, *commit_ = nullptr;
  mutable int last_code_ = SQLITE_OK;  // of the last failure (error(), exec())
};

}  // namespace

std::unique_ptr<Connection> open_sqlite(const std::string& path, bool read_only, std::string& error) {
  // Before SQLite initializes (its first open): without memory statistics, which nothing
  // reads, every allocation of SQLite skips a process-wide mutex. Only the history uses
  // SQLite in this process; if it were initialized already, the call is refused, harmlessly.
  static std::once_flag configured;
  std::call_once(configured, [] { sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); });
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
