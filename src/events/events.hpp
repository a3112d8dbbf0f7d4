#pragma once
// The Kafka event stream: one JSON event per finished request (docs/events.md). Events are
// handed to an idempotent librdkafka producer without ever blocking the caller; whatever
// cannot be delivered (queue full, delivery timeout, fatal producer error, shutdown) is
// appended to a JSONL fallback file, so an accepted event is either on the topic or in
// that file (or counted as dropped when even the file cannot be written).
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "config/records.hpp"
#include "telemetry/record.hpp"

namespace sluice::events {

struct Status {
  bool configured = false;
  std::string brokers;
  std::string topic;
  bool up = false;                    // a broker is reachable (see docs/events.md)
  std::int64_t queued = 0;            // rd_kafka_outq_len: not yet delivered / reported
  std::uint64_t produced = 0;         // accepted by the producer
  std::uint64_t delivered = 0;        // acknowledged by the cluster (acks=all)
  std::uint64_t failed = 0;           // delivery reports with an error (-> fallback)
  std::uint64_t rejected = 0;         // refused at once, e.g. queue full (-> fallback)
  std::uint64_t fallback_written = 0; // lines appended to the fallback file
  std::uint64_t dropped = 0;          // not even the fallback file could take them
  std::uint64_t skipped = 0;          // request.completed with include_completed=false
  std::uint64_t restarts = 0;         // producers recreated after a fatal error
  std::string last_error;
  std::string fallback_file;
};

class EventSink : public telemetry::RecordSink {
 public:
  // nullptr when !settings.enabled, or (with *error set) when the producer cannot be
  // configured. An unreachable cluster is not an error: the producer keeps reconnecting.
  static std::unique_ptr<EventSink> create(const config::EventSettings& settings, std::string instance,
                                           std::string host, std::string* error);

  // Bounded flush (5 s while up, 0.5 s while down), then everything still undelivered goes
  // to the fallback file with reason "shutdown". consume() must not run concurrently.
  ~EventSink() override;
  EventSink(const EventSink&) = delete;
  EventSink& operator=(const EventSink&) = delete;

  // Never blocks on the network; thread-safe.
  void consume(const telemetry::RequestRecord& r) override;
  // With the record's JSON already made (the access log's line): used as the event's data.
  void consume(const telemetry::RequestRecord& r, std::string_view json) override;
  // The same for each record, with the producer's lock taken once for the batch.
  void consume_batch(std::span<const telemetry::RequestRecord> records,
                     std::span<const std::string_view> json) override;

  // Any other event (the admin API's `admin.audit`): its envelope as a request's, `data`
  // (a JSON value) as its data, keyed by `key`. Never blocks on the network; thread-safe.
  void publish(std::string_view event, std::string_view key, std::string_view data);

  // Waits until every event accepted so far is delivered or in the fallback file.
  bool flush(std::chrono::milliseconds timeout);

  Status status() const;  // thread-safe

 private:
  struct Impl;
  explicit EventSink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend struct TestAccess;  // tests/unit/events: fabricates a fatal producer error
};

}  // namespace sluice::events
