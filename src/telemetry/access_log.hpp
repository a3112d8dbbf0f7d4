#pragma once
// The access log: one JSON line per request, formatted and written by its own thread so
// the request path only moves a record into a bounded queue. A full queue drops (and
// counts) instead of blocking. The same thread hands every record to the other sinks
// (history, events), so a request is moved once, whatever records it.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "telemetry/record.hpp"

namespace sluice::telemetry {

class AccessLog {
 public:
  // path: "-" for stdout, a file path (appended), or "" for none. `sinks` (which must
  // outlive this) also receive every record.
  explicit AccessLog(const std::string& path, std::size_t capacity = 65536, std::vector<RecordSink*> sinks = {});
  ~AccessLog();  // flushes what is queued
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  bool enabled() const noexcept { return out_ != nullptr; }  // lines are written
  bool active() const noexcept { return out_ != nullptr || !sinks_.empty(); }
  void submit(RequestRecord&& r);
  std::uint64_t written() const noexcept { return written_.load(std::memory_order_relaxed); }
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  void flush();  // waits until everything submitted so far is written

 private:
  void run();

  static constexpr std::size_t kWakeAt = 1024;  // queue depth that wakes the writer early
  static constexpr auto kPollInterval = std::chrono::milliseconds(20);

  std::FILE* out_ = nullptr;
  std::vector<RecordSink*> sinks_;
  bool owns_file_ = false;
  std::size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_, drained_;
  std::vector<RequestRecord> queue_;  // swapped with the writer's batch
  bool stop_ = false;
  std::size_t busy_ = 0;
  int flush_waiters_ = 0;
  std::atomic<std::uint64_t> written_{0}, dropped_{0};
  std::thread thread_;
};

}  // namespace sluice::telemetry
