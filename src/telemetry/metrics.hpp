#pragma once
// Request and upstream metrics. Each worker thread writes its own set (one uncontended
// lock per finished request); a scrape sums the sets. Label values are fixed at start
// (the configured models, tiers and backends; status codes and reason codes are small
// fixed sets), so no label ever carries a client-chosen string.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "telemetry/record.hpp"

namespace sluice::telemetry {

class Metrics {
 public:
  // Index -1 (or out of range) means "none": the request ended before it had a model, a
  // tier or a backend.
  Metrics(std::vector<std::string> models, std::vector<std::string> tiers, std::vector<std::string> backends);
  ~Metrics();

  class Worker {
   public:
    void request_started() noexcept { bump(in_flight_, 1); }
    void request_finished() noexcept { bump(in_flight_, -1); }
    void stream_opened() noexcept { bump(streams_open_, 1); }
    void stream_closed() noexcept { bump(streams_open_, -1); }
    // A finished request (after request_finished): counts, duration, TTFT and tokens.
    void record(const RequestRecord& r, int model, int tier);
    void upstream_started(int backend) noexcept;
    // `failed`: no usable answer (connect failure, 5xx, timeout, broken stream).
    void upstream_finished(int backend, bool failed, double seconds);

   private:
    friend class Metrics;
    explicit Worker(const Metrics& m);
    static void bump(std::atomic<std::int64_t>& g, std::int64_t d) noexcept {
      g.store(g.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);  // one writer
    }
    const Metrics& m_;
    std::atomic<std::int64_t> in_flight_{0};
    std::atomic<std::int64_t> streams_open_{0};
    std::unique_ptr<std::atomic<std::int64_t>[]> backend_in_flight_;
    mutable std::mutex mu_;  // taken by this worker once per request, and by a scrape
    std::unordered_map<std::uint64_t, std::uint64_t> requests_;  // packed labels -> count
    std::vector<std::uint64_t> duration_, ttft_;                  // [model][bucket]
    std::vector<double> duration_sum_, ttft_sum_;                 // [model]
    std::vector<std::uint64_t> prompt_tokens_, completion_tokens_;  // [model]
    std::vector<std::uint64_t> upstream_requests_, upstream_errors_;  // [backend]
    std::vector<std::uint64_t> upstream_latency_;                    // [backend][bucket]
    std::vector<double> upstream_latency_sum_;                       // [backend]
    // The business side: what was spent and saved (tokens, money by the route's price),
    // and how streams ended.
    struct Business {
      double spent_usd = 0;
      double saved_usd[3] = {};                // by kSavedBy
      std::uint64_t saved_tokens[3] = {};      // by kSavedBy
      std::uint64_t streams[3] = {};           // by kStreamOutcomes
    };
    std::vector<Business> business_;  // [model]
  };

  // How a request was answered without its own generation (RequestRecord::cache), and how
  // a stream that began ended: completed, the client left, or it failed.
  static constexpr const char* kSavedBy[] = {"cache", "semantic", "coalesced"};
  static constexpr const char* kStreamOutcomes[] = {"completed", "client_left", "failed"};

  // One per worker thread, made at start; lives as long as the Metrics.
  Worker& add_worker();

  // Requests being handled and streams open now, summed over the workers: both go back to
  // 0 when the load stops (/infra "requests").
  struct Live {
    std::int64_t requests = 0;
    std::int64_t streams = 0;
  };
  Live live() const;

  // Appends the Prometheus text of everything above, summed over the workers.
  void render(std::string& out) const;

  int model_index(std::string_view alias) const noexcept;
  int tier_index(std::string_view tier) const noexcept;
  int backend_index(std::string_view label) const noexcept;
  // The index of a label, adding it if new (a configuration reload brings new aliases
  // and backends); -1 once kSpareLabels have been added beyond those given at start.
  int add_model(std::string_view alias);
  int add_backend(std::string_view label);
  static constexpr std::size_t kSpareLabels = 64;

  static constexpr double kDurationBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  static constexpr double kTtftBuckets[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60};
  static constexpr double kUpstreamBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};

 private:
  int add_label(std::vector<std::string>& names, std::size_t cap, std::string_view v);

  mutable std::mutex labels_mu_;  // guards additions to models_ and backends_ (capacity reserved)
  std::vector<std::string> models_, tiers_, backends_;
  std::size_t model_cap_, backend_cap_;
  mutable std::mutex mu_;  // guards workers_ (the list, not their counts)
  std::vector<std::unique_ptr<Worker>> workers_;
};

// Process figures from /proc (CPU seconds, resident and virtual memory, open and max
// files, start time) in the Prometheus client conventions (process_*), and build info.
void render_process_metrics(std::string& out, std::string_view version);

// GPU utilisation and memory per device where NVML is present (loaded at run time);
// otherwise only sluice_gpu_devices 0.
void render_gpu_metrics(std::string& out);
// Loads NVML now (nvmlInit can take seconds without the driver's persistence mode): at
// start, so that no scrape, served on a worker's thread, waits for it.
void load_gpu_library();

// Writes one sample line: name{labels} value.
void metric_line(std::string& out, std::string_view name, std::string_view labels, double value);
// Writes the # HELP and # TYPE lines of a metric family.
void metric_help(std::string& out, std::string_view name, std::string_view type, std::string_view help);

}  // namespace sluice::telemetry
