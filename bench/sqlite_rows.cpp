// What SQLite itself spends per history row, outside the gateway: rows of the history's
// shape (migration 1's 33 columns) inserted the way the writer does (a connection
// without SQLite's mutexes, one transaction per batch, multi-row prepared INSERTs,
// values bound in place, WAL, synchronous=NORMAL), with variants of the table. Run under
// callgrind and strace by bench/sqlite_rows.sh, which divides by the rows this prints.
//
//   sqlite_rows DB_PATH INDEXES ROWS_PER_STATEMENT COLUMNS OMIT_NULL ROWS_PER_TX
//     INDEXES: 0 none, 1 unix_ms, 2 (key_name, unix_ms), 3 both (the schema's)
//     COLUMNS: the first COLUMNS columns of the table (33: all)
//     OMIT_NULL: 1 leaves out of the INSERT the columns the benchmark's rows never set
//     ROWS_PER_TX: rows per transaction (the writer's batch), a divisor of 38,400 and a
//                  multiple of ROWS_PER_STATEMENT
#include <sqlite3.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int kRows = 38'400;

struct Col {
  const char* name;
  const char* type;
  bool set;  // does a benchmark request (non-streaming, no options, no error) set it
};

// Migration 1's columns, in table order (src/history/schema.cpp).
constexpr Col kCols[] = {
    {"unix_ms", "BIGINT", true},          {"request_id", "TEXT", true},
    {"method", "TEXT", true},             {"path", "TEXT", true},
    {"key_name", "TEXT", true},           {"tenant", "TEXT", false},
    {"tier", "TEXT", false},              {"alias", "TEXT", true},
    {"model", "TEXT", true},              {"provider", "TEXT", true},
    {"backend", "TEXT", true},            {"status", "INTEGER", true},
    {"reason", "TEXT", true},             {"error", "TEXT", false},
    {"upstream_status", "INTEGER", true}, {"stream", "BOOLEAN", true},
    {"client_cancelled", "BOOLEAN", true}, {"wall_ms", "DOUBLE PRECISION", true},
    {"ttft_ms", "DOUBLE PRECISION", true}, {"tokens_per_s", "DOUBLE PRECISION", true},
    {"prompt_tokens", "BIGINT", true},    {"completion_tokens", "BIGINT", true},
    {"instance", "TEXT", true},           {"limiter", "TEXT", false},
    {"priority", "TEXT", false},          {"queue_ms", "DOUBLE PRECISION", false},
    {"reserved_tokens", "BIGINT", false}, {"temperature", "DOUBLE PRECISION", false},
    {"top_p", "DOUBLE PRECISION", false}, {"max_tokens", "BIGINT", true},
    {"num_ctx", "BIGINT", false},         {"num_gpu", "BIGINT", false},
    {"num_batch", "BIGINT", false},
};
constexpr int kAllCols = sizeof kCols / sizeof kCols[0];

int fail(sqlite3* db, const char* what) {
  std::fprintf(stderr, "sqlite_rows: %s: %s\n", what, sqlite3_errmsg(db));
  return 1;
}

// The value a benchmark row holds in column c (row r), bound to parameter p.
int bind(sqlite3_stmt* st, int p, int c, int r, const std::string& id) {
  switch (c) {
    case 0: return sqlite3_bind_int64(st, p, 1796000000000LL + r);
    case 1: return sqlite3_bind_text(st, p, id.data(), static_cast<int>(id.size()), SQLITE_STATIC);
    case 2: return sqlite3_bind_text(st, p, "POST", 4, SQLITE_STATIC);
    case 3: return sqlite3_bind_text(st, p, "/v1/chat/completions", 20, SQLITE_STATIC);
    case 4: return sqlite3_bind_text(st, p, "bench", 5, SQLITE_STATIC);
    case 7:
    case 8: return sqlite3_bind_text(st, p, "sluice-sim", 10, SQLITE_STATIC);
    case 9: return sqlite3_bind_text(st, p, "openai", 6, SQLITE_STATIC);
    case 10: return sqlite3_bind_text(st, p, "127.0.0.1:4000", 14, SQLITE_STATIC);
    case 11:
    case 14: return sqlite3_bind_int64(st, p, 200);
    case 12: return sqlite3_bind_text(st, p, "ok", 2, SQLITE_STATIC);
    case 15:
    case 16: return sqlite3_bind_int64(st, p, 0);
    case 17: return sqlite3_bind_double(st, p, 1.25 + r % 7);
    case 18: return sqlite3_bind_double(st, p, 1.1);
    case 19: return sqlite3_bind_double(st, p, 812.5);
    case 20: return sqlite3_bind_int64(st, p, 12);
    case 21:
    case 29: return sqlite3_bind_int64(st, p, 8);
    case 22: return sqlite3_bind_text(st, p, "vm:1234", 7, SQLITE_STATIC);
    default: return sqlite3_bind_null(st, p);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: sqlite_rows DB_PATH INDEXES ROWS_PER_STATEMENT COLUMNS OMIT_NULL ROWS_PER_TX\n");
    return 2;
  }
  const std::string path = argv[1];
  const int indexes = std::atoi(argv[2]);
  const int per = std::atoi(argv[3]);
  const int ncols = std::atoi(argv[4]);
  const bool omit = std::atoi(argv[5]) != 0;
  const int per_tx = std::atoi(argv[6]);
  if (per < 1 || per_tx < 1 || kRows % per_tx != 0 || per_tx % per != 0 || ncols < 5 || ncols > kAllCols) {
    std::fprintf(stderr, "sqlite_rows: ROWS_PER_TX must divide %d, ROWS_PER_STATEMENT divide it; COLUMNS 5..%d\n",
                 kRows, kAllCols);
    return 2;
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  sqlite3* db = nullptr;
  // As the writer opens it (src/history/sqlite_db.cpp): one thread uses the connection,
  // so no mutex per call.
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK)
    return fail(db, "open");
  if (sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr) != SQLITE_OK)
    return fail(db, "pragma");
  std::string sql = "CREATE TABLE requests (id INTEGER PRIMARY KEY";
  for (int c = 0; c < ncols; ++c) sql += std::string(", ") + kCols[c].name + " " + kCols[c].type;
  sql += ")";
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) return fail(db, "create");
  if ((indexes & 1) && sqlite3_exec(db, "CREATE INDEX a ON requests (unix_ms)", nullptr, nullptr, nullptr) != SQLITE_OK)
    return fail(db, "index");
  if ((indexes & 2) &&
      sqlite3_exec(db, "CREATE INDEX b ON requests (key_name, unix_ms)", nullptr, nullptr, nullptr) != SQLITE_OK)
    return fail(db, "index");

  std::vector<int> used;  // the columns the INSERT names
  for (int c = 0; c < ncols; ++c)
    if (!omit || kCols[c].set) used.push_back(c);
  sql = "INSERT INTO requests (";
  for (std::size_t k = 0; k < used.size(); ++k) sql += std::string(k ? "," : "") + kCols[used[k]].name;
  sql += ") VALUES ";
  for (int r = 0; r < per; ++r) {
    sql += r ? ",(" : "(";
    for (std::size_t k = 0; k < used.size(); ++k) sql += k ? ",?" : "?";
    sql += ")";
  }
  sqlite3_stmt* insert = nullptr;
  if (sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &insert, nullptr) != SQLITE_OK)
    return fail(db, "prepare");

  const int rows = kRows;
  std::vector<std::string> ids(static_cast<std::size_t>(rows));
  for (int i = 0; i < rows; ++i) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(i) * 0x9e3779b97f4a7c15ULL,
                  static_cast<unsigned long long>(i) * 0xbf58476d1ce4e5b9ULL);
    ids[static_cast<std::size_t>(i)] = buf;
  }
  for (int tx = 0; tx < rows; tx += per_tx) {
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) return fail(db, "begin");
    for (int first = tx; first < tx + per_tx; first += per) {
      int p = 1;
      for (int r = first; r < first + per; ++r)
        for (const int c : used)
          if (bind(insert, p++, c, r, ids[static_cast<std::size_t>(r)]) != SQLITE_OK) return fail(db, "bind");
      if (sqlite3_step(insert) != SQLITE_DONE) return fail(db, "insert");
      sqlite3_reset(insert);
    }
    if (sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) return fail(db, "commit");
  }
  sqlite3_finalize(insert);
  sqlite3_stmt* count = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT count(*) FROM requests", -1, &count, nullptr) != SQLITE_OK ||
      sqlite3_step(count) != SQLITE_ROW)
    return fail(db, "count");
  const auto written = sqlite3_column_int64(count, 0);
  sqlite3_finalize(count);
  sqlite3_close(db);
  if (written != rows) {
    std::fprintf(stderr, "sqlite_rows: %lld rows in the table, %d inserted\n", static_cast<long long>(written), rows);
    return 1;
  }
  std::printf("%d\n", rows);
  return 0;
}
