#include "events/events.hpp"

#include <sys/stat.h>

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <syslog.h>
#include <thread>

#include "common/ids.hpp"
#include "common/thread_name.hpp"
#include "common/text.hpp"
#include "events/testing.hpp"

namespace sluice::events {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr auto kFlushWhileUp = 5s;        // destructor: brokers reachable, worth waiting
constexpr auto kFlushWhileDown = 500ms;   // destructor: they go to the fallback file anyway
constexpr auto kPurgeWait = 2s;           // serving the purged messages' reports
constexpr auto kRecreateBackoff = 1s;     // between failed attempts to recreate the producer

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string describe(rd_kafka_resp_err_t err) {
  return std::string(rd_kafka_err2name(err)) + ": " + rd_kafka_err2str(err);
}

bool is_purge(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
}

}  // namespace

struct EventSink::Impl {
  config::EventSettings settings;
  std::string ident;  // `,"instance":"..","host":".."`, escaped once
  std::string client_id;

  // Only the poll thread replaces rk (after a fatal error); producers and status() readers
  // hold it shared, which never waits except during that swap.
  mutable std::shared_mutex rk_mu;
  rd_kafka_t* rk = nullptr;

  std::thread poller;
  std::atomic<bool> stop{false};
  std::atomic<bool> fatal{false};
  std::string purge_reason;  // set while draining a producer; read by the report callback
  std::string fatal_reason;  // poll thread only, like purge_reason
  SteadyClock::time_point next_recreate{};

  std::atomic<bool> up{false};
  std::atomic<std::uint64_t> produced{0}, delivered{0}, failed{0}, rejected{0}, fallback_written{0}, dropped{0},
      skipped{0}, restarts{0};
  // The same two counts for the current producer `rk` alone: what a retired producer was
  // given and never reported on is known, and counted as dropped.
  std::atomic<std::uint64_t> rk_produced{0}, rk_reported{0};

  mutable std::mutex err_mu;
  std::string last_error;

  std::mutex file_mu;
  std::FILE* file = nullptr;
  std::uint64_t file_bytes = 0;  // size of the open fallback file

  std::mutex flush_mu;
  std::condition_variable settled_cv;
  std::atomic<int> flush_waiters{0};

  ~Impl() {
    if (file) std::fclose(file);
  }

  bool settled() const { return delivered.load() + failed.load() >= produced.load(); }

  void note_error(std::string msg) {
    std::lock_guard lk(err_mu);
    last_error = std::move(msg);
  }

  void wake_flushers() {
    if (flush_waiters.load() == 0) return;
    std::lock_guard lk(flush_mu);
    settled_cv.notify_all();
  }

  // One JSONL line: {"reason":..,"failed_at":..,"event":{envelope}}. Flushed per line: this
  // is the failure path and the file is what an operator replays.
  // Hands one event to the producer (`lk`: rk_mu, taken here if not held; released when
  // the event is refused, around the fallback file).
  void produce(std::shared_lock<std::shared_mutex>& lk, std::string_view name, std::string_view key, const std::string& ev) {
    produced.fetch_add(1);  // before producev: its report may arrive before we return
    if (!lk.owns_lock()) lk.lock();
    rk_produced.fetch_add(1);
    // No RD_KAFKA_MSG_F_BLOCK: a full queue fails at once instead of stalling the caller.
    const rd_kafka_resp_err_t err = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(settings.topic.c_str()), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_KEY(key.empty() ? nullptr : key.data(), key.size()), RD_KAFKA_V_VALUE(const_cast<char*>(ev.data()), ev.size()),  // (copied: F_COPY)
        RD_KAFKA_V_HEADER("event", name.data(), static_cast<ssize_t>(name.size())), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return;
    rk_produced.fetch_sub(1);
    lk.unlock();
    produced.fetch_sub(1);
    rejected.fetch_add(1);
    std::string reason = describe(err);
    fallback(reason, ev);
    note_error(std::move(reason));
  }

  void fallback(std::string_view reason, std::string_view event) {
    std::string line;
    line.reserve(event.size() + reason.size() + 64);
    line += R"({"reason":)";
    append_json_string(line, reason);
    line += R"(,"failed_at":")";
    append_iso8601(line, now_ms());
    line += R"(","event":)";
    line += event;
    line += "}\n";

    std::lock_guard lk(file_mu);
    // Moved away (replayed) or deleted since it was opened: a new file at the path, so no
    // line lands in a file the operator already handled.
    struct stat at_path{}, open_one{};
    if (file && (::stat(settings.fallback_file.c_str(), &at_path) != 0 || ::fstat(::fileno(file), &open_one) != 0 ||
                 at_path.st_ino != open_one.st_ino || at_path.st_dev != open_one.st_dev)) {
      std::fclose(file);
      file = nullptr;
    }
    if (!file) {
      const std::filesystem::path path(settings.fallback_file);
      std::error_code ec;
      if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
      file = std::fopen(path.c_str(), "a");
      struct stat st{};
      file_bytes = file && ::fstat(::fileno(file), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    }
    const auto max = settings.fallback_max_bytes;
    if (file && max > 0 && file_bytes + line.size() > max) {
      dropped.fetch_add(1);
      note_error("fallback file " + settings.fallback_file + " is full (fallback_max_bytes " + std::to_string(max) +
                 "): events are dropped until it is replayed and moved away");
      return;
    }
    if (file && std::fwrite(line.data(), 1, line.size(), file) == line.size() && std::fflush(file) == 0) {
      file_bytes += line.size();
      fallback_written.fetch_add(1);
      return;
    }
    const int e = errno;
    if (file) {
      std::fclose(file);  // reopened on the next event (the disk may come back)
      file = nullptr;
    }
    dropped.fetch_add(1);
    note_error("fallback file " + settings.fallback_file + ": " + std::strerror(e));
  }

  rd_kafka_t* make_producer(std::string* error) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    const std::pair<const char*, std::string> props[] = {
        {"bootstrap.servers", settings.brokers},
        {"client.id", client_id},
        // Idempotence: retries after a lost ack never duplicate and keep per-partition order.
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"linger.ms", std::to_string(settings.linger.count())},
        {"queue.buffering.max.messages", std::to_string(settings.queue_messages)},
        {"message.timeout.ms", std::to_string(settings.delivery_timeout.count())},
        // Reconnect fast after an outage (the default backoff grows to 10 s).
        {"reconnect.backoff.ms", "100"},
        {"reconnect.backoff.max.ms", "1000"},
        {"retry.backoff.ms", "100"},
        {"socket.connection.setup.timeout.ms", "10000"},
        {"compression.type", settings.compression},
        // Broker states for `up`; only parsed while the cluster is considered down.
        {"statistics.interval.ms", "1000"},
    };
    for (const auto& [key, value] : props) {
      if (rd_kafka_conf_set(conf, key, value.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        if (error) *error = std::string("events: ") + key + ": " + err;
        return nullptr;
      }
    }
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_dr_msg_cb(conf, &Impl::on_delivery);
    rd_kafka_conf_set_error_cb(conf, &Impl::on_error);
    rd_kafka_conf_set_stats_cb(conf, &Impl::on_stats);
    rd_kafka_conf_set_log_cb(conf, &Impl::on_log);
    rd_kafka_t* handle = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!handle) {
      rd_kafka_conf_destroy(conf);  // only owned by rd_kafka_new on success
      if (error) *error = std::string("events: ") + err;
    }
    return handle;
  }

  // Callbacks run on whichever thread calls rd_kafka_poll: the poll thread, or the
  // destructor after the poll thread has stopped; never two at once.
  // "fatal: <error>: <reason>" when `rk` is in a fatal state, else "".
  static std::string fatal_of(rd_kafka_t* rk) {
    char buf[512];
    const auto fe = rd_kafka_fatal_error(rk, buf, sizeof buf);
    if (fe == RD_KAFKA_RESP_ERR_NO_ERROR) return {};
    return std::string("fatal: ") + rd_kafka_err2name(fe) + ": " + buf;
  }

  static void on_delivery(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<Impl*>(opaque);
    if (rk == self->rk) self->rk_reported.fetch_add(1);
    if (!m->err) {
      self->delivered.fetch_add(1);
      self->up.store(true);
    } else {
      // A fatal error fails what the producer holds, and those reports can come in the
      // same poll as the error itself, before the producer is replaced: they say fatal.
      std::string reason = is_purge(m->err) && !self->purge_reason.empty() ? self->purge_reason : fatal_of(rk);
      if (reason.empty()) reason = describe(m->err);
      // Sent, but its acknowledgement never came (a timeout or a purge while in flight):
      // the broker may have it, and a replay of the file would then add it twice.
      if (rd_kafka_message_status(m) == RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED) reason += " (possibly delivered)";
      self->fallback(reason, {static_cast<const char*>(m->payload), m->len});
      self->failed.fetch_add(1);  // after the line is written: settled means "on disk"
      self->note_error(std::move(reason));
    }
    self->wake_flushers();
  }

  static void on_error(rd_kafka_t* rk, int code, const char* reason, void* opaque) {
    auto* self = static_cast<Impl*>(opaque);
    const auto err = static_cast<rd_kafka_resp_err_t>(code);
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
      std::string msg = fatal_of(rk);
      if (rk == self->rk && !self->fatal.load()) {
        self->fatal_reason = msg;
        self->fatal.store(true);
      }
      self->note_error(std::move(msg));
      return;
    }
    self->note_error(std::string(rd_kafka_err2name(err)) + ": " + reason);
    if (rk != self->rk) return;  // a producer being replaced
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN || err == RD_KAFKA_RESP_ERR__TRANSPORT ||
        err == RD_KAFKA_RESP_ERR__RESOLVE)
      self->up.store(false);
  }

  // Up again once any real broker connection is UP (deliveries also set it).
  static int on_stats(rd_kafka_t* rk, char* json, std::size_t len, void* opaque) {
    auto* self = static_cast<Impl*>(opaque);
    if (self->up.load() || rk != self->rk) return 0;
    boost::system::error_code ec;
    const auto doc = boost::json::parse(std::string_view(json, len), ec);
    const auto* brokers = ec || !doc.is_object() ? nullptr : doc.as_object().if_contains("brokers");
    if (!brokers || !brokers->is_object()) return 0;
    for (const auto& [name, b] : brokers->as_object()) {
      const auto* obj = b.if_object();
      const auto* state = obj ? obj->if_contains("state") : nullptr;
      const auto* source = obj ? obj->if_contains("source") : nullptr;
      if (!state || !source || !state->is_string() || !source->is_string()) continue;
      if (state->as_string() == "UP" && source->as_string() != "internal" && source->as_string() != "logical") {
        self->up.store(true);
        break;
      }
    }
    return 0;  // librdkafka frees json
  }

  static void on_log(const rd_kafka_t*, int level, const char* fac, const char* buf) {
    if (level <= LOG_WARNING) std::fprintf(stderr, "sluice events: kafka %s: %s\n", fac, buf);
  }

  // Fails everything `handle` still holds into the fallback file with `reason`, then
  // destroys it. It was given `produced` events and reported on `reported` of them before.
  // A purged request in flight waits for its broker to answer, and rd_kafka_destroy
  // serves no report: the events whose report has not come after kPurgeWait are lost,
  // their payloads with them. They are counted as dropped (and settled: a flush does not
  // wait for them), and said in last_error.
  void retire(rd_kafka_t* handle, std::string reason, std::uint64_t produced_to_it, std::uint64_t reported) {
    // Only this handle's reports are served until it is gone (by this thread).
    const auto settled_before = delivered.load() + failed.load();
    purge_reason = reason;
    rd_kafka_purge(handle, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    const auto deadline = SteadyClock::now() + kPurgeWait;
    while (rd_kafka_outq_len(handle) > 0 && SteadyClock::now() < deadline) rd_kafka_poll(handle, 50);
    rd_kafka_destroy(handle);
    purge_reason.clear();
    reported += delivered.load() + failed.load() - settled_before;
    if (produced_to_it <= reported) return;
    const auto lost = produced_to_it - reported;
    dropped.fetch_add(lost);
    failed.fetch_add(lost);
    note_error(std::to_string(lost) + " events lost (" + reason +
               "): their producer was closed before the brokers answered for them");
    wake_flushers();
  }

  // An idempotent producer that raised a fatal error refuses everything from then on.
  void recreate() {
    if (SteadyClock::now() < next_recreate) return;
    std::string err;
    rd_kafka_t* fresh = make_producer(&err);
    if (!fresh) {
      note_error("recreating the producer after a fatal error: " + err);
      next_recreate = SteadyClock::now() + kRecreateBackoff;
      return;
    }
    rd_kafka_t* old = nullptr;
    std::uint64_t old_produced = 0, old_reported = 0;
    {
      std::unique_lock lk(rk_mu);  // no event is being produced meanwhile
      old = rk;
      rk = fresh;
      old_produced = rk_produced.exchange(0);
      old_reported = rk_reported.exchange(0);
    }
    fatal.store(false);
    restarts.fetch_add(1);
    retire(old, fatal_reason, old_produced, old_reported);
  }

  void run() {
    while (!stop.load()) {
      rd_kafka_poll(rk, 100);
      if (fatal.load()) recreate();
    }
  }
};

std::unique_ptr<EventSink> EventSink::create(const config::EventSettings& settings, std::string instance,
                                             std::string host, std::string* error) {
  if (!settings.enabled) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->settings = settings;
  if (impl->settings.fallback_file.empty()) impl->settings.fallback_file = "events-fallback.jsonl";
  impl->ident = R"(,"instance":)";
  append_json_string(impl->ident, instance);
  impl->ident += R"(,"host":)";
  append_json_string(impl->ident, host);
  impl->client_id = "sluice" + (instance.empty() ? std::string() : "-" + instance);
  impl->rk = impl->make_producer(error);
  if (!impl->rk) return nullptr;
  impl->poller = std::thread([p = impl.get()] {
    name_this_thread("sluice-events");
    p->run();
  });
  return std::unique_ptr<EventSink>(new EventSink(std::move(impl)));
}

EventSink::EventSink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

EventSink::~EventSink() {
  auto& s = *impl_;
  flush(s.up.load() ? std::chrono::milliseconds(kFlushWhileUp) : std::chrono::milliseconds(kFlushWhileDown));
  s.stop.store(true);
  s.poller.join();
  s.retire(s.rk, "shutdown", s.rk_produced.load(), s.rk_reported.load());
}

namespace {

// An event's envelope up to its data: {"event":..,"id":..,"time":..,"unix_ms":..,<ident>
void begin_event(std::string& ev, std::string_view name, std::string_view ident) {
  const std::int64_t now = now_ms();
  ev.clear();
  ev += R"({"event":")";
  ev += name;
  ev += R"(","id":")";
  append_request_id(ev);  // (128 random bits: unique per event)
  // The time, formatted once per millisecond: a batch's events mostly share theirs.
  thread_local std::int64_t time_ms = -1;
  thread_local std::string time_text;  // "<iso8601>","unix_ms":<ms>
  if (now != time_ms) {
    time_ms = now;
    time_text.clear();
    append_iso8601(time_text, now);
    time_text += R"(","unix_ms":)";
    char digits[24];
    time_text.append(digits, std::to_chars(digits, digits + sizeof digits, now).ptr);
  }
  ev += R"(","time":")";
  ev += time_text;
  ev += ident;
}

}  // namespace

void EventSink::consume(const telemetry::RequestRecord& r) { consume(r, {}); }

void EventSink::consume(const telemetry::RequestRecord& r, std::string_view json) {
  const std::string_view jsons[] = {json};
  consume_batch(std::span<const telemetry::RequestRecord>(&r, 1), jsons);
}

void EventSink::consume_batch(std::span<const telemetry::RequestRecord> records,
                              std::span<const std::string_view> json) {
  auto& s = *impl_;
  // Held shared across the batch (one lock instead of one per event); released around the
  // fallback file, which a refused event is written to.
  std::shared_lock lk(s.rk_mu, std::defer_lock);
  // Built in a buffer of this thread that keeps its capacity (producev copies it).
  thread_local std::string ev;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    const auto type = telemetry::event_type(r);
    if (type == telemetry::EventType::completed && !s.settings.include_completed) {
      s.skipped.fetch_add(1);
      continue;
    }
    const std::string_view name = telemetry::to_string(type);
    begin_event(ev, name, s.ident);
    ev += R"(,"data":)";
    if (json[i].empty()) telemetry::append_json(ev, r);
    else ev += json[i];
    ev += '}';

    // Keyed by request id: all events of one request land on one partition, in order.
    s.produce(lk, name, r.request_id, ev);
  }
}

void EventSink::publish(std::string_view event, std::string_view key, std::string_view data) {
  auto& s = *impl_;
  std::shared_lock lk(s.rk_mu, std::defer_lock);
  std::string ev;
  begin_event(ev, event, s.ident);
  ev += R"(,"data":)";
  ev += data;
  ev += '}';
  s.produce(lk, event, key, ev);
}

bool EventSink::flush(std::chrono::milliseconds timeout) {
  auto& s = *impl_;
  const auto deadline = SteadyClock::now() + timeout;
  s.flush_waiters.fetch_add(1);
  std::unique_lock lk(s.flush_mu);
  const bool ok = s.settled_cv.wait_until(lk, deadline, [&] { return s.settled(); });
  s.flush_waiters.fetch_sub(1);
  return ok;
}

Status EventSink::status() const {
  const auto& s = *impl_;
  Status st;
  st.configured = true;
  st.brokers = s.settings.brokers;
  st.topic = s.settings.topic;
  st.up = s.up.load();
  {
    std::shared_lock lk(s.rk_mu);
    st.queued = rd_kafka_outq_len(s.rk);
  }
  st.produced = s.produced.load();
  st.delivered = s.delivered.load();
  st.failed = s.failed.load();
  st.rejected = s.rejected.load();
  st.fallback_written = s.fallback_written.load();
  st.dropped = s.dropped.load();
  st.skipped = s.skipped.load();
  st.restarts = s.restarts.load();
  {
    std::lock_guard lk(s.err_mu);
    st.last_error = s.last_error;
  }
  st.fallback_file = s.settings.fallback_file;
  return st;
}

bool TestAccess::raise_fatal(EventSink& sink) {
  auto& s = *sink.impl_;
  std::shared_lock lk(s.rk_mu);
  return rd_kafka_test_fatal_error(s.rk, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, "drill") ==
         RD_KAFKA_RESP_ERR_NO_ERROR;
}

}  // namespace sluice::events
