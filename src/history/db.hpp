#pragma once
// Internal to the history library: the row, its columns, and one connection interface
// with a SQLite and a PostgreSQL implementation, so batching, migrations and the queries
// are written once.
#include <chrono>
#include <cstdint>
#include <limits>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace sluice::history {

// A signed column's NULL (num_gpu: -1 is a value, "all layers").
inline constexpr std::int64_t kNullInt = std::numeric_limits<std::int64_t>::min();

// One request as stored. Negative numbers and empty strings of nullable columns are NULL
// (kNullInt in a column whose values may be negative).
struct Row {
  std::int64_t unix_ms = 0;
  std::string request_id, method, path, key_name, tenant, tier, alias, model, provider, backend;
  std::int64_t status = 0;
  std::string reason, error;
  std::int64_t upstream_status = -1;
  bool stream = false, client_cancelled = false;
  double wall_ms = 0, ttft_ms = -1, tokens_per_s = -1;
  std::int64_t prompt_tokens = -1, completion_tokens = -1;
  std::string instance, limiter, priority;
  double queue_ms = -1;
  std::int64_t reserved_tokens = -1;
  double temperature = -1, top_p = -1;
  std::int64_t max_tokens = -1, num_ctx = -1, num_gpu = kNullInt, num_batch = -1;
  std::string cache;  // migration 4
  std::int64_t saved_tokens = -1;
  std::string guard;
  std::string client;  // migration 8
};

using Member = std::variant<std::int64_t Row::*, double Row::*, std::string Row::*, bool Row::*>;
struct Column {
  std::string_view name;
  Member member;
  bool nullable;
  bool negative_values = false;  // NULL is kNullInt, not any negative number
};
// In table order after `id`; the INSERT and the list output follow it.
std::span<const Column> columns();

// A value read from or bound to a statement (queries). Booleans travel as 0/1.
using Value = std::variant<std::monostate, std::int64_t, double, std::string>;

// Calls f(column, value) for each column of `row` in table order, without copying: value
// is std::monostate (NULL), std::int64_t, double, bool or std::string_view (into `row`).
// What the writers bind per row.
template <class F>
void for_each_value(const Row& row, F&& f) {
  for (const Column& c : columns()) {
    std::visit(
        [&](auto member) {
          const auto& v = row.*member;
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) {
            f(c, v);
          } else if constexpr (std::is_same_v<T, std::string>) {
            if (c.nullable && v.empty()) f(c, std::monostate{});
            else f(c, std::string_view(v));
          } else if constexpr (std::is_same_v<T, std::int64_t>) {
            if (c.nullable && (c.negative_values ? v == kNullInt : v < 0)) f(c, std::monostate{});
            else f(c, v);
          } else {
            if (c.nullable && v < 0) f(c, std::monostate{});
            else f(c, v);
          }
        },
        c.member);
  }
}

enum class Dialect { sqlite, postgres };

class Connection {
 public:
  virtual ~Connection() = default;
  virtual Dialect dialect() const noexcept = 0;
  // One statement with parameters; on_row (may be empty) sees each result row. Returns
  // "" or the error.
  using RowFn = std::function<void(std::vector<Value>& row)>;
  virtual std::string query(const std::string& sql, const std::vector<Value>& params, const RowFn& on_row) = 0;
  // Statements without parameters, separated by ';'.
  virtual std::string exec(const std::string& sql) = 0;
  // exec() for statements that may run long on purpose (a migration building an index on
  // a large table lifts the server's statement timeout for its transaction): the client
  // waits up to `limit` instead of giving up after the statement timeout (and leaving the
  // server to finish, holding its locks, work nobody waits for).
  virtual std::string exec_long(const std::string& sql, std::chrono::milliseconds limit) = 0;
  // All rows in one transaction: all are written or none.
  virtual std::string insert(std::span<const Row> rows) = 0;
  // Whether the last statement that failed was refused for what it held (PostgreSQL: a
  // data exception or an integrity violation, SQLSTATE classes 22 and 23; SQLite: a
  // constraint, a type mismatch, a value too big), so that the same rows would be refused
  // again. Any other failure (the database down, full, slow, locked, read-only, a broken
  // connection) says nothing against the rows.
  virtual bool refused_for_content() const noexcept = 0;
};

// The n-th (1-based) parameter placeholder of the dialect: "?1" or "$1".
std::string placeholder(Dialect d, int n);

std::unique_ptr<Connection> open_sqlite(const std::string& path, bool read_only, std::string& error);
// statement_timeout bounds each statement on the server and, plus a margin, on the client
// (a server that stops answering cannot stall the caller forever).
std::unique_ptr<Connection> open_postgres(const std::string& url, std::chrono::milliseconds connect_timeout,
                                          std::chrono::milliseconds statement_timeout, std::string& error);
// The URL with the password (userinfo or ?password=) replaced by ***; "" if unparsable.
std::string mask_postgres_url(std::string_view url);
// Replaces every occurrence of the URL's password in `text` (libpq errors can echo
// connection details).
std::string scrub_password(std::string text, std::string_view url);

inline constexpr int kSchemaVersion = 8;
// Applies the migrations not yet recorded in schema_migrations (idempotent, safe when
// several instances start at once), up to `up_to` (the tests make older schemas). Sets
// `version` to the schema version afterwards.
std::string migrate(Connection& c, int& version, int up_to = kSchemaVersion);

// History::usage's statement: key_name, tenant, tier, alias, the tokens charged, the rows;
// parameters: since_ms, until_ms.
std::string usage_sql(Dialect d);

// The column a stats group_by name reads ("key" -> "key_name"); "" if unknown.
std::string_view group_column(std::string_view group_by);

}  // namespace sluice::history
