#include "telemetry/metrics.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/event_backend.hpp"
#include "common/text.hpp"

namespace sluice::telemetry {

namespace {

constexpr std::size_t kDurationN = std::size(Metrics::kDurationBuckets) + 1;  // + the +Inf bucket
constexpr std::size_t kTtftN = std::size(Metrics::kTtftBuckets) + 1;
constexpr std::size_t kUpstreamN = std::size(Metrics::kUpstreamBuckets) + 1;

template <std::size_t N>
std::size_t bucket_of(const double (&bounds)[N], double v) {
  return static_cast<std::size_t>(std::lower_bound(bounds, bounds + N, v) - bounds);
}

// Labels of a request counter, packed: model and tier (+1, 0 = none), status, reason, stream.
std::uint64_t pack(int model, int tier, int status, Reason reason, bool stream) {
  return (static_cast<std::uint64_t>(model + 1) & 0xffff) | (static_cast<std::uint64_t>(tier + 1) & 0xffff) << 16 |
         (static_cast<std::uint64_t>(status) & 0xffff) << 32 | static_cast<std::uint64_t>(reason) << 48 |
         static_cast<std::uint64_t>(stream) << 56;
}

std::string label_value(std::string_view v) {
  std::string out;
  append_json_string(out, v);  // the same escapes as Prometheus label values: \\ \" \n
  return out;
}

const std::string& name_or_none(const std::vector<std::string>& names, int i, const std::string& none) {
  return i >= 0 && static_cast<std::size_t>(i) < names.size() ? names[static_cast<std::size_t>(i)] : none;
}

int index_of(const std::vector<std::string>& names, std::string_view v) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == v) return static_cast<int>(i);
  }
  return -1;
}

void fmt_bound(char (&buf)[32], double b) { std::snprintf(buf, sizeof buf, "%g", b); }

// Cumulative buckets, _sum and _count of one labelled series.
template <std::size_t N>
void histogram(std::string& o, std::string_view name, const std::string& labels, const double (&bounds)[N],
               const std::uint64_t* counts, double sum) {
  std::uint64_t cum = 0;
  const std::string base = std::string(name) + "_bucket";
  for (std::size_t b = 0; b <= N; ++b) {
    cum += counts[b];
    char le[32];
    if (b < N) fmt_bound(le, bounds[b]);
    else std::snprintf(le, sizeof le, "+Inf");
    metric_line(o, base, labels + (labels.empty() ? "" : ",") + "le=\"" + le + "\"", static_cast<double>(cum));
  }
  metric_line(o, std::string(name) + "_sum", labels, sum);
  metric_line(o, std::string(name) + "_count", labels, static_cast<double>(cum));
}

}  // namespace

void metric_line(std::string& o, std::string_view name, std::string_view labels, double v) {
  o += name;
  if (!labels.empty()) {
    o += '{';
    o += labels;
    o += '}';
  }
  char buf[32];
  const int n = std::snprintf(buf, sizeof buf, " %.17g\n", v);
  o.append(buf, static_cast<std::size_t>(n));
}

void metric_help(std::string& o, std::string_view name, std::string_view type, std::string_view text) {
  o += "# HELP ";
  o += name;
  o += ' ';
  o += text;
  o += "\n# TYPE ";
  o += name;
  o += ' ';
  o += type;
  o += '\n';
}

Metrics::Metrics(std::vector<std::string> models, std::vector<std::string> tiers, std::vector<std::string> backends)
    : models_(std::move(models)),
      tiers_(std::move(tiers)),
      backends_(std::move(backends)),
      model_cap_(models_.size() + kSpareLabels),
      backend_cap_(backends_.size() + kSpareLabels) {
  // Never reallocated: the workers' arrays are sized for the capacity, and labels added
  // later (a configuration reload) only fill spare rows.
  models_.reserve(model_cap_);
  backends_.reserve(backend_cap_);
}

Metrics::~Metrics() = default;

int Metrics::model_index(std::string_view alias) const noexcept {
  std::lock_guard lock(labels_mu_);
  return index_of(models_, alias);
}
int Metrics::tier_index(std::string_view tier) const noexcept { return index_of(tiers_, tier); }
int Metrics::backend_index(std::string_view label) const noexcept {
  std::lock_guard lock(labels_mu_);
  return index_of(backends_, label);
}

int Metrics::add_label(std::vector<std::string>& names, std::size_t cap, std::string_view v) {
  std::lock_guard lock(labels_mu_);
  if (const int i = index_of(names, v); i >= 0) return i;
  if (names.size() >= cap) return -1;
  names.emplace_back(v);
  return static_cast<int>(names.size() - 1);
}

int Metrics::add_model(std::string_view alias) { return add_label(models_, model_cap_, alias); }
int Metrics::add_backend(std::string_view label) { return add_label(backends_, backend_cap_, label); }

Metrics::Worker::Worker(const Metrics& m) : m_(m) {
  const std::size_t models = m.model_cap_ + 1, backends = m.backend_cap_;
  backend_in_flight_ = std::make_unique<std::atomic<std::int64_t>[]>(backends);
  duration_.assign(models * kDurationN, 0);
  ttft_.assign(models * kTtftN, 0);
  duration_sum_.assign(models, 0);
  ttft_sum_.assign(models, 0);
  prompt_tokens_.assign(models, 0);
  completion_tokens_.assign(models, 0);
  upstream_requests_.assign(backends, 0);
  upstream_errors_.assign(backends, 0);
  upstream_latency_.assign(backends * kUpstreamN, 0);
  upstream_latency_sum_.assign(backends, 0);
  business_.assign(models, Business{});
}

Metrics::Worker& Metrics::add_worker() {
  std::lock_guard lock(mu_);
  workers_.push_back(std::unique_ptr<Worker>(new Worker(*this)));
  return *workers_.back();
}

void Metrics::Worker::record(const RequestRecord& r, int model, int tier) {
  if (model < 0 || static_cast<std::size_t>(model) >= m_.model_cap_) model = -1;
  if (tier < 0 || static_cast<std::size_t>(tier) >= m_.tiers_.size()) tier = -1;
  const std::size_t mi = static_cast<std::size_t>(model + 1);  // row 0: no model
  const double wall_s = r.wall_ms / 1000.0;
  std::lock_guard lock(mu_);
  ++requests_[pack(model, tier, r.status, r.reason, r.stream)];
  ++duration_[mi * kDurationN + bucket_of(kDurationBuckets, wall_s)];
  duration_sum_[mi] += wall_s;
  if (r.ttft_ms >= 0) {
    const double t = r.ttft_ms / 1000.0;
    ++ttft_[mi * kTtftN + bucket_of(kTtftBuckets, t)];
    ttft_sum_[mi] += t;
  }
  if (r.prompt_tokens > 0) prompt_tokens_[mi] += static_cast<std::uint64_t>(r.prompt_tokens);
  if (r.completion_tokens > 0) completion_tokens_[mi] += static_cast<std::uint64_t>(r.completion_tokens);
  Business& b = business_[mi];
  if (r.cost_usd > 0) b.spent_usd += r.cost_usd;
  if (r.saved_tokens > 0) {
    const std::size_t by = r.cache == "semantic" ? 1 : r.cache == "coalesced" ? 2 : 0;
    b.saved_tokens[by] += static_cast<std::uint64_t>(r.saved_tokens);
    if (r.saved_usd > 0) b.saved_usd[by] += r.saved_usd;
  }
  // A stream that began: its 200 went out (a refusal is a plain reply), or its client left
  // after a first token (499 then).
  if (r.stream && (r.status == 200 || (r.client_cancelled && r.ttft_ms >= 0))) {
    ++b.streams[r.client_cancelled ? 1 : r.reason == Reason::ok ? 0 : 2];
  }
}

void Metrics::Worker::upstream_started(int backend) noexcept {
  if (backend < 0 || static_cast<std::size_t>(backend) >= m_.backend_cap_) return;
  bump(backend_in_flight_[static_cast<std::size_t>(backend)], 1);
}

void Metrics::Worker::upstream_finished(int backend, bool failed, double seconds) {
  if (backend < 0 || static_cast<std::size_t>(backend) >= m_.backend_cap_) return;
  const auto b = static_cast<std::size_t>(backend);
  bump(backend_in_flight_[b], -1);
  std::lock_guard lock(mu_);
  ++upstream_requests_[b];
  if (failed) ++upstream_errors_[b];
  ++upstream_latency_[b * kUpstreamN + bucket_of(kUpstreamBuckets, seconds)];
  upstream_latency_sum_[b] += seconds;
}

Metrics::Live Metrics::live() const {
  Live l;
  std::lock_guard lock(mu_);
  for (const auto& w : workers_) {
    l.requests += w->in_flight_.load(std::memory_order_relaxed);
    l.streams += w->streams_open_.load(std::memory_order_relaxed);
  }
  return l;
}

void Metrics::render(std::string& o) const {
  std::unique_lock labels(labels_mu_);  // held while the label rows are read
  const std::size_t models = models_.size() + 1, backends = backends_.size();
  std::map<std::uint64_t, std::uint64_t> requests;  // sorted: stable output
  std::vector<std::uint64_t> duration(models * kDurationN), ttft(models * kTtftN), prompt(models), completion(models);
  std::vector<double> duration_sum(models), ttft_sum(models), upstream_sum(backends);
  std::vector<std::uint64_t> up_requests(backends), up_errors(backends), up_latency(backends * kUpstreamN);
  std::vector<std::int64_t> up_in_flight(backends);
  std::vector<Worker::Business> business(models);
  std::int64_t in_flight = 0, streams_open = 0;
  {
    std::lock_guard lock(mu_);
    for (const auto& w : workers_) {
      in_flight += w->in_flight_.load(std::memory_order_relaxed);
      streams_open += w->streams_open_.load(std::memory_order_relaxed);
      for (std::size_t b = 0; b < backends; ++b) up_in_flight[b] += w->backend_in_flight_[b].load(std::memory_order_relaxed);
      std::lock_guard wl(w->mu_);
      for (const auto& [k, n] : w->requests_) requests[k] += n;
      for (std::size_t i = 0; i < duration.size(); ++i) duration[i] += w->duration_[i];
      for (std::size_t i = 0; i < ttft.size(); ++i) ttft[i] += w->ttft_[i];
      for (std::size_t i = 0; i < models; ++i) {
        duration_sum[i] += w->duration_sum_[i];
        ttft_sum[i] += w->ttft_sum_[i];
        prompt[i] += w->prompt_tokens_[i];
        completion[i] += w->completion_tokens_[i];
        const auto& wb = w->business_[i];
        auto& b = business[i];
        b.spent_usd += wb.spent_usd;
        for (int k = 0; k < 3; ++k) {
          b.saved_usd[k] += wb.saved_usd[k];
          b.saved_tokens[k] += wb.saved_tokens[k];
          b.streams[k] += wb.streams[k];
        }
      }
      for (std::size_t b = 0; b < backends; ++b) {
        up_requests[b] += w->upstream_requests_[b];
        up_errors[b] += w->upstream_errors_[b];
        upstream_sum[b] += w->upstream_latency_sum_[b];
      }
      for (std::size_t i = 0; i < up_latency.size(); ++i) up_latency[i] += w->upstream_latency_[i];
    }
  }
  static const std::string kNone;
  auto model_label = [&](std::size_t mi) {
    return "model=" + label_value(name_or_none(models_, static_cast<int>(mi) - 1, kNone));
  };

  metric_help(o, "sluice_requests_total", "counter",
              "Finished requests by model alias, tier, HTTP status, reason code and streaming.");
  for (const auto& [k, n] : requests) {
    const int model = static_cast<int>(k & 0xffff) - 1, tier = static_cast<int>((k >> 16) & 0xffff) - 1;
    const int status = static_cast<int>((k >> 32) & 0xffff);
    const auto reason = static_cast<Reason>((k >> 48) & 0xff);
    const bool stream = (k >> 56) & 1;
    std::string labels = "model=" + label_value(name_or_none(models_, model, kNone)) +
                         ",tier=" + label_value(name_or_none(tiers_, tier, kNone)) + ",status=\"" +
                         std::to_string(status) + "\",reason=\"" + std::string(reason_code(reason)) +
                         "\",stream=\"" + (stream ? "true" : "false") + "\"";
    metric_line(o, "sluice_requests_total", labels, static_cast<double>(n));
  }
  metric_help(o, "sluice_requests_in_flight", "gauge", "Requests being handled now.");
  metric_line(o, "sluice_requests_in_flight", "", static_cast<double>(in_flight));
  metric_help(o, "sluice_streams_open", "gauge", "Streamed answers being relayed now.");
  metric_line(o, "sluice_streams_open", "", static_cast<double>(streams_open));

  metric_help(o, "sluice_request_duration_seconds", "histogram", "Time from request arrival to the last byte, by model.");
  for (std::size_t mi = 0; mi < models; ++mi) {
    histogram(o, "sluice_request_duration_seconds", model_label(mi), kDurationBuckets, &duration[mi * kDurationN],
              duration_sum[mi]);
  }
  metric_help(o, "sluice_ttft_seconds", "histogram", "Time to first token, by model.");
  for (std::size_t mi = 0; mi < models; ++mi) {
    histogram(o, "sluice_ttft_seconds", model_label(mi), kTtftBuckets, &ttft[mi * kTtftN], ttft_sum[mi]);
  }
  metric_help(o, "sluice_prompt_tokens_total", "counter", "Prompt tokens of finished requests, by model.");
  for (std::size_t mi = 0; mi < models; ++mi) {
    metric_line(o, "sluice_prompt_tokens_total", model_label(mi), static_cast<double>(prompt[mi]));
  }
  metric_help(o, "sluice_completion_tokens_total", "counter", "Completion tokens relayed to clients, by model.");
  for (std::size_t mi = 0; mi < models; ++mi) {
    metric_line(o, "sluice_completion_tokens_total", model_label(mi), static_cast<double>(completion[mi]));
  }

  metric_help(o, "sluice_streams_total", "counter",
              "Streamed answers that began (a 200, or a first token), by model and how they ended: completed, "
              "client_left (the client went "
              "away before the end), failed (the upstream or a deadline ended it). The completion rate is "
              "completed over all.");
  for (std::size_t mi = 0; mi < models; ++mi) {
    for (int k = 0; k < 3; ++k) {
      metric_line(o, "sluice_streams_total", model_label(mi) + ",outcome=\"" + kStreamOutcomes[k] + "\"",
                  static_cast<double>(business[mi].streams[k]));
    }
  }
  metric_help(o, "sluice_saved_tokens_total", "counter",
              "Tokens (prompt and completion) not generated, by model and by what answered instead: the cache "
              "(exact), its semantic stage, or a shared generation (coalesced).");
  for (std::size_t mi = 0; mi < models; ++mi) {
    for (int k = 0; k < 3; ++k) {
      metric_line(o, "sluice_saved_tokens_total", model_label(mi) + ",by=\"" + kSavedBy[k] + "\"",
                  static_cast<double>(business[mi].saved_tokens[k]));
    }
  }
  metric_help(o, "sluice_spent_usd_total", "counter",
              "Estimated spend of the tokens charged, by model, at the route's `price` (0 without one).");
  for (std::size_t mi = 0; mi < models; ++mi) metric_line(o, "sluice_spent_usd_total", model_label(mi), business[mi].spent_usd);
  metric_help(o, "sluice_saved_usd_total", "counter",
              "Estimated money the saved tokens would have cost, by model and by what answered instead, at the "
              "route's `price`.");
  for (std::size_t mi = 0; mi < models; ++mi) {
    for (int k = 0; k < 3; ++k) {
      metric_line(o, "sluice_saved_usd_total", model_label(mi) + ",by=\"" + kSavedBy[k] + "\"", business[mi].saved_usd[k]);
    }
  }

  metric_help(o, "sluice_upstream_in_flight", "gauge", "Upstream requests open now, by backend.");
  for (std::size_t b = 0; b < backends; ++b) {
    metric_line(o, "sluice_upstream_in_flight", "backend=" + label_value(backends_[b]), static_cast<double>(up_in_flight[b]));
  }
  metric_help(o, "sluice_upstream_requests_total", "counter", "Upstream requests finished, by backend.");
  for (std::size_t b = 0; b < backends; ++b) {
    metric_line(o, "sluice_upstream_requests_total", "backend=" + label_value(backends_[b]),
                static_cast<double>(up_requests[b]));
  }
  metric_help(o, "sluice_upstream_errors_total", "counter",
              "Upstream requests without a usable answer (connect failure, 5xx, timeout, broken stream), by backend.");
  for (std::size_t b = 0; b < backends; ++b) {
    metric_line(o, "sluice_upstream_errors_total", "backend=" + label_value(backends_[b]), static_cast<double>(up_errors[b]));
  }
  metric_help(o, "sluice_upstream_duration_seconds", "histogram", "Upstream request time until its answer ended, by backend.");
  for (std::size_t b = 0; b < backends; ++b) {
    histogram(o, "sluice_upstream_duration_seconds", "backend=" + label_value(backends_[b]), kUpstreamBuckets,
              &up_latency[b * kUpstreamN], upstream_sum[b]);
  }
}

void render_process_metrics(std::string& o, std::string_view version) {
  metric_help(o, "sluice_build_info", "gauge", "Always 1; the labels say which build runs.");
  metric_line(o, "sluice_build_info", "version=" + label_value(version) + ",compiler=" + label_value(__VERSION__) +
                                                ",event_backend=" + label_value(common::event_backend()),
              1);

  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  // /proc/self/stat: fields after the command name (which may contain spaces) are fixed.
  std::ifstream st("/proc/self/stat");
  std::string line;
  std::getline(st, line);
  const auto close = line.rfind(')');
  if (close != std::string::npos) {
    std::istringstream in(line.substr(close + 2));
    std::vector<std::string> f;
    for (std::string x; in >> x;) f.push_back(x);
    // f[0] is field 3 (state): utime = field 14, stime 15, starttime 22, vsize 23, rss 24.
    if (f.size() > 21) {
      const double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;
      double boot = 0;
      std::ifstream sst("/proc/stat");
      for (std::string l; std::getline(sst, l);) {
        if (l.rfind("btime ", 0) == 0) boot = std::stod(l.substr(6));
      }
      metric_help(o, "process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.");
      metric_line(o, "process_cpu_seconds_total", "", cpu);
      metric_help(o, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
      metric_line(o, "process_resident_memory_bytes", "", std::stod(f[21]) * page);
      metric_help(o, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
      metric_line(o, "process_virtual_memory_bytes", "", std::stod(f[20]));
      metric_help(o, "process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch, in seconds.");
      metric_line(o, "process_start_time_seconds", "", boot + std::stod(f[19]) / ticks);
    }
  }
  std::error_code ec;
  std::size_t fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    ++fds;
  }
  if (fds > 0) --fds;  // the directory iterator's own descriptor
  metric_help(o, "process_open_fds", "gauge", "Open file descriptors.");
  metric_line(o, "process_open_fds", "", static_cast<double>(fds));
  std::ifstream lim("/proc/self/limits");
  for (std::string l; std::getline(lim, l);) {
    if (l.rfind("Max open files", 0) == 0) {
      std::istringstream in(l.substr(14));
      std::string soft;
      in >> soft;
      if (soft != "unlimited") {
        metric_help(o, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        metric_line(o, "process_max_fds", "", std::stod(soft));
      }
    }
  }
}

}  // namespace sluice::telemetry
