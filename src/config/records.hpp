#pragma once
// Where requests are recorded beyond the access log: the request history (SQLite or
// PostgreSQL) and the event stream (Kafka, with a local JSONL fallback). Part of the
// validated Config (see docs/history.md and docs/events.md).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::config {

enum class HistoryBackend : std::uint8_t { none, sqlite, postgres };
std::string_view to_string(HistoryBackend) noexcept;

struct HistorySettings {
  // sqlite by default (a file in data_dir); postgres when `url` (or SLUICE_DATABASE_URL)
  // is a postgres:// or postgresql:// URL; none turns history off.
  HistoryBackend backend = HistoryBackend::sqlite;
  std::string sqlite_path;         // "" = <data_dir>/history.db
  std::string url;                 // libpq connection URI; never logged unmasked
  std::size_t batch_rows = 1000;   // flush when this many rows are queued...
  std::chrono::milliseconds flush_interval{1000};  // ...or this long after the first
  std::size_t queue_size = 50000;  // rows waiting to be written; beyond it rows are dropped
  std::chrono::milliseconds retry_interval{1000};  // after a failed write: reconnect, retry
  std::chrono::milliseconds connect_timeout{2000};
  int retention_days = 0;          // 0 = keep forever
};

struct EventSettings {
  bool enabled = false;            // true when brokers are set
  std::string brokers;             // librdkafka bootstrap.servers, e.g. "127.0.0.1:9092"
  std::string topic = "sluice.requests";
  std::string fallback_file;       // "" = <data_dir>/events-fallback.jsonl
  // Beyond this size, events that cannot go to Kafka are dropped (and counted) until the
  // file is moved away (after a replay); 0 = no limit.
  std::uint64_t fallback_max_bytes = 1ull << 30;
  std::size_t queue_messages = 100000;  // librdkafka queue.buffering.max.messages
  std::chrono::milliseconds linger{5};  // batching delay (linger.ms)
  // compression.type: none, lz4, snappy, gzip or zstd. None by default: compressing costs
  // the gateway's CPU (lz4: ~3,800 instructions an event), saved bytes are the broker's.
  std::string compression = "none";
  std::chrono::milliseconds delivery_timeout{30000};  // message.timeout.ms: then the fallback file
  bool include_completed = true;   // request.completed events (the others are always sent)
};

}  // namespace sluice::config
