#include "telemetry/access_log.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <stdexcept>
#include <vector>

#include "common/text.hpp"
#include "common/thread_name.hpp"

namespace sluice::telemetry {
namespace {

// Each helper appends `prefix` (the literal ,"key": text) and the value.
template <std::size_t N>
void field(std::string& o, const char (&prefix)[N], std::string_view v) {
  o.append(prefix, N - 1);
  append_json_string(o, v);
}
template <std::size_t N>
void field_num(std::string& o, const char (&prefix)[N], double v) {
  o.append(prefix, N - 1);
  if (!(v >= 0) || !std::isfinite(v)) {  // not set (-1), or a client's 1e400
    o += "null";
    return;
  }
  char buf[32];
  const double tenths = std::round(v * 10) / 10;
  // One decimal while it fits; a client's 1e30 in the shortest exact form ("1e+30").
  auto [end, ec] = tenths < 1e15 ? std::to_chars(buf, buf + sizeof buf, tenths, std::chars_format::fixed, 1)
                                 : std::to_chars(buf, buf + sizeof buf, tenths);
  if (ec != std::errc()) {
    o += "null";
    return;
  }
  o.append(buf, static_cast<std::size_t>(end - buf));
}
// Money: up to 8 significant digits ("0.00012345").
template <std::size_t N>
void field_usd(std::string& o, const char (&prefix)[N], double v) {
  o.append(prefix, N - 1);
  char buf[40];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 8);
  if (ec != std::errc() || !std::isfinite(v)) {
    o += "null";
    return;
  }
  o.append(buf, static_cast<std::size_t>(end - buf));
}
template <std::size_t N>
void field_int(std::string& o, const char (&prefix)[N], std::int64_t v, bool negative_ok = false) {
  o.append(prefix, N - 1);
  if (v < 0 && !negative_ok) {
    o += "null";
    return;
  }
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  o.append(buf, static_cast<std::size_t>(end - buf));
}

}  // namespace

void append_json(std::string& o, const RequestRecord& r) {
  o += "{\"time\":";
  o.push_back('"');
  append_iso8601(o, r.unix_ms);
  o.push_back('"');
  field(o, ",\"request_id\":", r.request_id);
  field(o, ",\"instance\":", r.instance);
  if (!r.client.empty()) field(o, ",\"client\":", r.client);
  field(o, ",\"method\":", r.method);
  field(o, ",\"path\":", r.path);
  field(o, ",\"key_id\":", r.key_masked);
  field(o, ",\"key_name\":", r.key_name);
  field(o, ",\"tenant\":", r.tenant);
  field(o, ",\"tier\":", r.tier);
  field(o, ",\"alias\":", r.alias);
  field(o, ",\"model\":", r.model);
  field(o, ",\"provider\":", r.provider);
  field(o, ",\"backend\":", r.backend);
  if (r.attempts > 1) field_int(o, ",\"attempts\":", r.attempts);
  if (!r.served_by.empty()) field(o, ",\"served_by\":", r.served_by);
  field_int(o, ",\"status\":", r.status);
  field(o, ",\"reason\":", reason_code(r.reason));
  if (!r.error.empty()) field(o, ",\"error\":", r.error);
  field_int(o, ",\"upstream_status\":", r.upstream_status > 0 ? r.upstream_status : -1);
  o += r.stream ? ",\"stream\":true" : ",\"stream\":false";
  o += r.client_cancelled ? ",\"client_cancelled\":true" : ",\"client_cancelled\":false";
  field_num(o, ",\"wall_ms\":", r.wall_ms);
  field_num(o, ",\"ttft_ms\":", r.ttft_ms);
  field_num(o, ",\"tokens_per_s\":", r.tokens_per_s);
  field_int(o, ",\"prompt_tokens\":", r.prompt_tokens);
  field_int(o, ",\"completion_tokens\":", r.completion_tokens);
  if (!r.limiter.empty()) field(o, ",\"limiter\":", r.limiter);
  if (!r.priority.empty()) field(o, ",\"priority\":", r.priority);
  if (r.queue_ms >= 0) field_num(o, ",\"queue_ms\":", r.queue_ms);
  if (r.reserved_tokens >= 0) field_int(o, ",\"reserved_tokens\":", r.reserved_tokens);
  if (!r.cache.empty()) field(o, ",\"cache\":", r.cache);
  if (r.saved_tokens >= 0) field_int(o, ",\"saved_tokens\":", r.saved_tokens);
  if (r.cost_usd >= 0) field_usd(o, ",\"cost_usd\":", r.cost_usd);
  if (r.saved_usd >= 0) field_usd(o, ",\"saved_usd\":", r.saved_usd);
  if (!r.guard.empty()) field(o, ",\"guard\":", r.guard);
  if (r.temperature >= 0) field_num(o, ",\"temperature\":", r.temperature);
  if (r.top_p >= 0) field_num(o, ",\"top_p\":", r.top_p);
  if (r.max_tokens >= 0) field_int(o, ",\"max_tokens\":", r.max_tokens);
  if (r.num_ctx >= 0) field_int(o, ",\"num_ctx\":", r.num_ctx);
  if (r.num_gpu != kUnsetSigned) field_int(o, ",\"num_gpu\":", r.num_gpu, /*negative_ok=*/true);
  if (r.num_batch >= 0) field_int(o, ",\"num_batch\":", r.num_batch);
  o += '}';
}

std::string_view to_string(EventType t) noexcept {
  switch (t) {
    case EventType::completed: return "request.completed";
    case EventType::rate_limited: return "request.rate_limited";
    case EventType::auth_failed: return "request.auth_failed";
    case EventType::error: return "request.error";
  }
  return "request.error";
}

EventType event_type(const RequestRecord& r) noexcept {
  switch (r.reason) {
    case Reason::ok:
    case Reason::client_closed:  // served until the client left
      return EventType::completed;
    case Reason::missing_key:
    case Reason::invalid_key:
    case Reason::model_not_allowed:
    case Reason::forbidden:
      return EventType::auth_failed;
    case Reason::rate_limited:
    case Reason::token_limit_exceeded:
    case Reason::quota_exceeded:
    case Reason::queue_full:
    case Reason::queue_timeout:
    case Reason::queued:  // told when to come back
    case Reason::limiter_unavailable:
      return EventType::rate_limited;
    default:
      return r.status > 0 && r.status < 400 ? EventType::completed : EventType::error;
  }
}

std::string to_json(const RequestRecord& r) {
  std::string o;
  o.reserve(640);
  append_json(o, r);
  return o;
}

AccessLog::AccessLog(const std::string& path, std::size_t capacity, std::vector<RecordSink*> sinks)
    : sinks_(std::move(sinks)), capacity_(capacity) {
  queue_.reserve(std::min(capacity_, kWakeAt));  // a writer that keeps up never grows it under the lock
  if (path.empty()) {
    if (!sinks_.empty()) thread_ = std::thread([this] { run(); });
    return;
  }
  if (path == "-") {
    out_ = stdout;
  } else {
    out_ = std::fopen(path.c_str(), "a");
    if (!out_) throw std::runtime_error("cannot open access log " + path);
    owns_file_ = true;
  }
  thread_ = std::thread([this] { run(); });
}

AccessLog::~AccessLog() {
  if (!active()) return;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (owns_file_) std::fclose(out_);
}

void AccessLog::submit(RequestRecord&& r) {
  if (!active()) return;
  bool wake;
  {
    std::lock_guard lk(mu_);
    if (queue_.size() >= capacity_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(r));
    // The writer polls every kPollInterval; waking it per record costs a futex call and a
    // context switch per request (measured: the largest cost on the request path).
    wake = queue_.size() == kWakeAt;
  }
  if (wake) cv_.notify_one();
}

void AccessLog::flush() {
  if (!active()) return;
  std::unique_lock lk(mu_);
  ++flush_waiters_;
  cv_.notify_one();
  drained_.wait(lk, [&] { return queue_.empty() && busy_ == 0; });
  --flush_waiters_;
}

void AccessLog::run() {
  name_this_thread("sluice-log");
  lower_this_thread_priority();
  std::vector<RequestRecord> batch;
  batch.reserve(std::min(capacity_, kWakeAt));
  std::string text;
  std::vector<std::size_t> ends;  // where each record's JSON ends in `text`
  std::vector<std::string_view> json;  // each record's JSON in `text`
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, kPollInterval,
                   [&] { return stop_ || queue_.size() >= kWakeAt || (flush_waiters_ > 0 && !queue_.empty()); });
      if (queue_.empty()) {
        if (stop_) return;
        continue;
      }
      // Swapped, not moved record by record: the workers' submit() waits on this lock, and
      // this thread runs at a lower priority (lower_this_thread_priority) that may keep it
      // off the CPU for a while if it is preempted holding the lock.
      std::swap(batch, queue_);  // (batch is empty here; the two vectors keep their capacity)
      busy_ = batch.size();
    }
    // Each record's JSON once: the log line, and what the sinks may send on.
    text.clear();
    ends.clear();
    for (const auto& r : batch) {
      append_json(text, r);
      ends.push_back(text.size());
      text += '\n';
    }
    if (out_) {
      std::fwrite(text.data(), 1, text.size(), out_);
      std::fflush(out_);
      written_.fetch_add(batch.size(), std::memory_order_relaxed);
    }
    if (!sinks_.empty()) {
      json.clear();
      std::size_t begin = 0;
      for (const std::size_t end : ends) {
        json.emplace_back(text.data() + begin, end - begin);
        begin = end + 1;
      }
      // Records the sinks must not see (queries of the history) leave the batch; the
      // others keep their order. Their log lines are written above.
      std::size_t kept = 0;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (!batch[i].to_sinks) continue;
        if (kept != i) {
          batch[kept] = std::move(batch[i]);
          json[kept] = json[i];
        }
        ++kept;
      }
      // The whole batch at once: each sink takes its lock (and wakes its thread) once.
      if (kept > 0) {
        const std::span<const RequestRecord> records(batch.data(), kept);
        const std::span<const std::string_view> lines(json.data(), kept);
        for (auto* sink : sinks_) sink->consume_batch(records, lines);
      }
    }
    batch.clear();
    {
      std::lock_guard lk(mu_);
      busy_ = 0;
    }
    drained_.notify_all();
  }
}

}  // namespace sluice::telemetry
