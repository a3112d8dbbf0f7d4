// Where requests are recorded beyond the access log: the request history (SQLite or
// PostgreSQL, docs/history.md) and the event stream (Kafka, docs/events.md).
#include <string>

#include "config/schema.hpp"

namespace sluice::config::detail {

namespace {

const Enum<HistoryBackend>& history_backend_enum() {
  static const Enum<HistoryBackend> e{"backend",
                                      {{"sqlite", HistoryBackend::sqlite},
                                       {"postgres", HistoryBackend::postgres},
                                       {"postgresql", HistoryBackend::postgres, false},
                                       {"none", HistoryBackend::none},
                                       {"off", HistoryBackend::none, false}}};
  return e;
}

// A path in the file: relative to the file's directory.
template <class S>
Key<S> path_key(std::string_view name, std::string S::*m, std::string dflt, std::string doc) {
  return text(name, m, std::move(doc))
      .with_default(std::move(dflt))
      .then([m](Loader& l, const YAML::Node&, const std::string&, S& s) {
        s.*m = l.resolve_path(s.*m);
        return true;
      });
}

const Table<HistorySettings>& history_table() {
  const Millis positive{1};
  static const Table<HistorySettings> t{
      "history",
      {
          choice("backend", &HistorySettings::backend, history_backend_enum(),
                 "Where the history goes; `none` turns it off. Setting `url` selects `postgres`.")
              .from_env("SLUICE_HISTORY_BACKEND", "(`sqlite`, `postgres` or `none`)"),
          path_key("path", &HistorySettings::sqlite_path, "`<data_dir>/history.db`", "The SQLite file."),
          text("url", &HistorySettings::url, "A `postgres://` or `postgresql://` URL (libpq); never logged unmasked.")
              .with_default("none")
              .then([](Loader& l, const YAML::Node& n, const std::string& p, HistorySettings& h) {
                if (!h.url.empty() && !is_postgres_url(h.url)) l.fail(p, n, "expected a postgres:// or postgresql:// URL");
                return true;
              })
              .from_env("SLUICE_DATABASE_URL", "(a `postgres://` or `postgresql://` URL), and `history.backend: postgres`")
              .env_then([](Loader& l, const YAML::Node&, const std::string&, HistorySettings& h) {
                if (!l.getenv("SLUICE_HISTORY_BACKEND")) h.backend = HistoryBackend::postgres;  // that one wins
                return true;
              }),
          integer("batch_rows", &HistorySettings::batch_rows, 1, 100'000, "Flush when this many rows are queued..."),
          duration("flush_interval", &HistorySettings::flush_interval, positive, "...or this long after the first."),
          integer("queue_size", &HistorySettings::queue_size, 1, 10'000'000,
                  "Rows waiting to be written; beyond it rows are dropped (and counted)."),
          duration("retry_interval", &HistorySettings::retry_interval, positive,
                   "After a failed write: reconnect, retry."),
          duration("connect_timeout", &HistorySettings::connect_timeout, positive, "Connecting to PostgreSQL."),
          integer("retention_days", &HistorySettings::retention_days, 0, 100'000,
                  "Rows older than this are deleted; 0 = keep forever."),
      }};
  return t;
}

const Table<EventSettings>& events_table() {
  static const Table<EventSettings> t{
      "events",
      {
          text("brokers", &EventSettings::brokers,
               "Kafka bootstrap servers (`host:port,...`); setting it turns events on.")
              .with_default("none (events off)")
              .then([](Loader&, const YAML::Node&, const std::string&, EventSettings& e) {
                e.enabled = !e.brokers.empty();
                return true;
              })
              .from_env("SLUICE_KAFKA_BROKERS", "(turns events on)"),
          text("topic", &EventSettings::topic, "1–249 characters of `[a-zA-Z0-9._-]`.")
              .then([](Loader& l, const YAML::Node& n, const std::string& p, EventSettings& e) {
                const bool ok = !e.topic.empty() && e.topic.size() <= 249 &&
                                e.topic.find_first_not_of(
                                    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                                    std::string::npos;
                if (!ok) l.fail(p, n, "a Kafka topic is 1-249 characters of [a-zA-Z0-9._-]");
                return true;
              })
              .from_env("SLUICE_KAFKA_TOPIC"),
          path_key("fallback_file", &EventSettings::fallback_file, "`<data_dir>/events-fallback.jsonl`",
                   "Where events that cannot go to Kafka are written."),
          integer("fallback_max_bytes", &EventSettings::fallback_max_bytes, 0, std::int64_t{1} << 50,
                  "Beyond this size, such events are dropped (and counted); 0 = no limit.")
              .with_default("1073741824 (1 GiB)"),
          integer("queue_messages", &EventSettings::queue_messages, 1, 10'000'000,
                  "librdkafka `queue.buffering.max.messages`."),
          duration("linger", &EventSettings::linger, Millis{0}, "Batching delay (`linger.ms`)."),
          text("compression", &EventSettings::compression,
               "`none`, `lz4`, `snappy`, `gzip` or `zstd` (compressing costs the gateway's CPU).")
              .then([](Loader& l, const YAML::Node& n, const std::string& p, EventSettings& e) {
                if (e.compression != "none" && e.compression != "lz4" && e.compression != "snappy" &&
                    e.compression != "gzip" && e.compression != "zstd") {
                  l.fail(p, n, "must be none, lz4, snappy, gzip or zstd");
                }
                return true;
              }),
          duration("delivery_timeout", &EventSettings::delivery_timeout, Millis{1},
                   "`message.timeout.ms`: then the fallback file; longer than `linger`."),
          boolean("include_completed", &EventSettings::include_completed,
                  "Send `request.completed` events (the others are always sent)."),
      }};
  return t;
}

}  // namespace

bool is_postgres_url(std::string_view u) { return u.starts_with("postgres://") || u.starts_with("postgresql://"); }

void read_history(Loader& l, const YAML::Node& n, Config& c) {
  if (n.IsNull()) return;
  Fields f;
  auto& h = c.history;
  if (!history_table().read(l, n, "history", h, &f)) return;
  // A postgres URL selects postgres, unless the backend is given.
  if (!Loader::get(f, "backend") && !h.url.empty() && is_postgres_url(h.url)) h.backend = HistoryBackend::postgres;
}

void read_events(Loader& l, const YAML::Node& n, Config& c) {
  if (n.IsNull()) return;
  events_table().read(l, n, "events", c.events);
}

void records_env(Loader& l, Config& c) {
  history_table().apply_env(l, c.history);
  events_table().apply_env(l, c.events);
}

void records_env_reference(std::vector<EnvDoc>& out) {
  history_table().env_doc(out, "history");
  events_table().env_doc(out, "events");
}

void check_records(Loader& l, Config& c) {
  if (c.history.backend == HistoryBackend::postgres && c.history.url.empty()) {
    l.error("history.url", 0, "backend postgres needs a URL (history.url or SLUICE_DATABASE_URL)");
  }
  if (c.events.enabled && c.events.delivery_timeout <= c.events.linger) {
    l.error("events.delivery_timeout", 0, "must be longer than events.linger (Kafka's message.timeout.ms > linger.ms)");
  }
  if (c.history.sqlite_path.empty()) c.history.sqlite_path = (fs::path(c.data_dir) / "history.db").string();
  if (c.events.fallback_file.empty()) c.events.fallback_file = (fs::path(c.data_dir) / "events-fallback.jsonl").string();
}

void records_reference(std::vector<TableDoc>& out) {
  out.push_back(history_table().doc());
  out.push_back(events_table().doc());
}

}  // namespace sluice::config::detail

namespace sluice::config {

std::string_view to_string(HistoryBackend b) noexcept {
  switch (b) {
    case HistoryBackend::none: return "none";
    case HistoryBackend::sqlite: return "sqlite";
    case HistoryBackend::postgres: return "postgres";
  }
  return "?";
}

}  // namespace sluice::config
