// The event sink against librdkafka's mock cluster (the real Kafka protocol on loopback),
// read back with a real consumer. Conditions are awaited with timeouts; no fixed sleeps.
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "events/events.hpp"
#include "events/testing.hpp"

using namespace sluice;
using namespace std::chrono_literals;
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

constexpr auto kWait = 30s;  // generous: only reached when something is broken

bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds timeout = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

class MockCluster {
 public:
  explicit MockCluster(int brokers = 1) : brokers_(brokers) {
    char err[256];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "4", err, sizeof err);
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    mc_ = rk_ ? rd_kafka_mock_cluster_new(rk_, brokers) : nullptr;
    if (mc_) bootstrap_ = rd_kafka_mock_cluster_bootstraps(mc_);
  }
  ~MockCluster() {
    if (mc_) rd_kafka_mock_cluster_destroy(mc_);
    if (rk_) rd_kafka_destroy(rk_);
  }
  MockCluster(const MockCluster&) = delete;
  MockCluster& operator=(const MockCluster&) = delete;

  bool ok() const { return mc_ != nullptr; }
  const std::string& bootstrap() const { return bootstrap_; }
  void create_topic(const std::string& topic, int partitions) {
    ASSERT_EQ(rd_kafka_mock_topic_create(mc_, topic.c_str(), partitions, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  void set_down() {
    for (int id = 1; id <= brokers_; ++id) rd_kafka_mock_broker_set_down(mc_, id);
  }
  void set_up() {
    for (int id = 1; id <= brokers_; ++id) rd_kafka_mock_broker_set_up(mc_, id);
  }
  // Every broker answers this late.
  void set_rtt(int ms) {
    for (int id = 1; id <= brokers_; ++id) rd_kafka_mock_broker_set_rtt(mc_, id, ms);
  }

 private:
  int brokers_;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_mock_cluster_t* mc_ = nullptr;
  std::string bootstrap_;
};

struct Message {
  std::string key;
  std::string header_event;
  int partition = -1;
  json::object value;
};

// Reads every partition from the beginning to its end. Call after EventSink::flush()
// returned true: then everything delivered is already on the broker.
std::vector<Message> read_topic(const std::string& bootstrap, const std::string& topic, int partitions,
                                bool* complete) {
  char err[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  for (auto [k, v] : {std::pair{"bootstrap.servers", bootstrap.c_str()},
                      {"group.id", "sluice-test"},
                      {"enable.auto.commit", "false"},
                      {"enable.partition.eof", "true"},
                      {"log_level", "4"}})
    EXPECT_EQ(rd_kafka_conf_set(conf, k, v, err, sizeof err), RD_KAFKA_CONF_OK) << err;
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  EXPECT_NE(rk, nullptr) << err;
  std::vector<Message> out;
  *complete = false;
  if (!rk) return out;
  rd_kafka_poll_set_consumer(rk);
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p)
    rd_kafka_topic_partition_list_add(parts, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  EXPECT_EQ(rd_kafka_assign(rk, parts), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_topic_partition_list_destroy(parts);

  std::set<int> at_end;
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (static_cast<int>(at_end.size()) < partitions && std::chrono::steady_clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (!m) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      at_end.insert(m->partition);
    } else if (!m->err) {
      Message msg;
      msg.partition = m->partition;
      if (m->key) msg.key.assign(static_cast<const char*>(m->key), m->key_len);
      rd_kafka_headers_t* hdrs = nullptr;
      const void* hv = nullptr;
      std::size_t hl = 0;
      if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
          rd_kafka_header_get_last(hdrs, "event", &hv, &hl) == RD_KAFKA_RESP_ERR_NO_ERROR)
        msg.header_event.assign(static_cast<const char*>(hv), hl);
      boost::system::error_code ec;
      auto v = json::parse(std::string_view(static_cast<const char*>(m->payload), m->len), ec);
      EXPECT_FALSE(ec) << std::string_view(static_cast<const char*>(m->payload), m->len);
      if (!ec && v.is_object()) msg.value = v.as_object();
      out.push_back(std::move(msg));
    }
    rd_kafka_message_destroy(m);
  }
  *complete = static_cast<int>(at_end.size()) == partitions;
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return out;
}

std::vector<json::object> read_fallback(const std::string& path) {
  std::vector<json::object> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    boost::system::error_code ec;
    auto v = json::parse(line, ec);
    EXPECT_FALSE(ec) << line;
    if (!ec && v.is_object()) out.push_back(v.as_object());
  }
  return out;
}

std::string str(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

std::string request_id_of(const json::object& envelope) {
  const auto* d = envelope.if_contains("data");
  return d && d->is_object() ? str(d->as_object(), "request_id") : std::string();
}

telemetry::RequestRecord record(std::string id, int status, Reason reason) {
  telemetry::RequestRecord r;
  r.unix_ms = 1700000000123;
  r.request_id = std::move(id);
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.key_name = "prod";
  r.alias = "demo";
  r.model = "llama3";
  r.status = status;
  r.reason = reason;
  return r;
}

telemetry::RequestRecord completed(std::string id) { return record(std::move(id), 200, Reason::ok); }

// A loopback port nothing listens on.
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class EventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(mock_.ok());
    dir_ = fs::path(::testing::TempDir()) /
           ("sluice-events-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    mock_.create_topic(topic_, kPartitions);
    settings_.enabled = true;
    settings_.brokers = mock_.bootstrap();
    settings_.topic = topic_;
    settings_.fallback_file = (dir_ / "sub" / "events-fallback.jsonl").string();  // dirs made on demand
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<events::EventSink> make() {
    std::string error;
    auto sink = events::EventSink::create(settings_, "gw-1", "host-a", &error);
    EXPECT_NE(sink, nullptr) << error;
    EXPECT_EQ(error, "");
    return sink;
  }

  // A sink that saw the cluster up, then saw it go down (null, with a test failure, when it
  // did not).
  std::unique_ptr<events::EventSink> make_then_take_the_cluster_down() {
    auto sink = make();
    if (!sink) return nullptr;
    if (!wait_until([&] { return sink->status().up; })) {
      ADD_FAILURE() << "the sink never saw the cluster up";
      return nullptr;
    }
    mock_.set_down();
    if (!wait_until([&] { return !sink->status().up; })) {
      ADD_FAILURE() << "the sink never saw the cluster down";
      return nullptr;
    }
    return sink;
  }

  std::vector<Message> topic_messages() {
    bool complete = false;
    auto msgs = read_topic(mock_.bootstrap(), topic_, kPartitions, &complete);
    EXPECT_TRUE(complete) << "did not reach the end of every partition";
    return msgs;
  }

  static constexpr int kPartitions = 3;
  MockCluster mock_;
  std::string topic_ = "sluice.requests";
  fs::path dir_;
  config::EventSettings settings_;
};

TEST_F(EventsTest, DisabledCreatesNothing) {
  settings_.enabled = false;
  std::string error;
  EXPECT_EQ(events::EventSink::create(settings_, "gw-1", "host-a", &error), nullptr);
  EXPECT_EQ(error, "");
}

TEST_F(EventsTest, EachEventTypeArrivesWithItsEnvelope) {
  auto sink = make();
  ASSERT_NE(sink, nullptr);
  const std::map<std::string, std::pair<telemetry::RequestRecord, std::string>> sent = {
      {"req-ok", {record("req-ok", 200, Reason::ok), "request.completed"}},
      {"req-429", {record("req-429", 429, Reason::rate_limited), "request.rate_limited"}},
      {"req-401", {record("req-401", 401, Reason::invalid_key), "request.auth_failed"}},
      {"req-502", {record("req-502", 502, Reason::upstream_error), "request.error"}},
  };
  const auto before = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (const auto& [id, rec] : sent) sink->consume(rec.first);
  ASSERT_TRUE(sink->flush(kWait));

  const auto msgs = topic_messages();
  ASSERT_EQ(msgs.size(), sent.size());
  std::set<std::string> ids, seen;
  for (const auto& m : msgs) {
    const auto& ev = m.value;
    const auto rid = request_id_of(ev);
    ASSERT_TRUE(sent.count(rid)) << json::serialize(ev);
    seen.insert(rid);
    const auto& [rec, type] = sent.at(rid);
    EXPECT_EQ(str(ev, "event"), type);
    EXPECT_EQ(m.header_event, type);
    EXPECT_EQ(m.key, rid);  // keyed by request id
    const auto id = str(ev, "id");
    EXPECT_TRUE(id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos) << id;
    ids.insert(id);
    EXPECT_EQ(str(ev, "instance"), "gw-1");
    EXPECT_EQ(str(ev, "host"), "host-a");
    ASSERT_TRUE(ev.contains("unix_ms") && ev.at("unix_ms").is_int64());
    const auto unix_ms = ev.at("unix_ms").as_int64();
    EXPECT_GE(unix_ms, before);
    // "time" is unix_ms as ISO-8601 UTC with milliseconds.
    const std::time_t secs = unix_ms / 1000;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char expect[80];
    std::snprintf(expect, sizeof expect, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(unix_ms % 1000));
    EXPECT_EQ(str(ev, "time"), expect);
    const auto& data = ev.at("data").as_object();
    EXPECT_EQ(data.at("status").as_int64(), rec.status);
    EXPECT_EQ(str(data, "model"), "llama3");
  }
  EXPECT_EQ(seen.size(), sent.size());
  EXPECT_EQ(ids.size(), sent.size()) << "envelope ids must be unique";

  const auto st = sink->status();
  EXPECT_TRUE(st.configured);
  EXPECT_TRUE(st.up);
  EXPECT_EQ(st.topic, topic_);
  EXPECT_EQ(st.brokers, mock_.bootstrap());
  EXPECT_EQ(st.produced, 4u);
  EXPECT_EQ(st.delivered, 4u);
  EXPECT_EQ(st.failed + st.rejected + st.fallback_written + st.dropped, 0u);
  EXPECT_FALSE(fs::exists(settings_.fallback_file));
}

TEST_F(EventsTest, EveryCompressionCodecDelivers) {
  // Each codec's events, read back from the topic (librdkafka's consumer decompresses).
  std::size_t total = 0;
  for (const std::string codec : {"lz4", "zstd", "gzip", "snappy"}) {
    settings_.compression = codec;
    auto sink = make();
    ASSERT_NE(sink, nullptr) << codec;
    for (int i = 0; i < 20; ++i) sink->consume(record(codec + "-" + std::to_string(i), 200, Reason::ok));
    ASSERT_TRUE(sink->flush(kWait)) << codec;
    const auto st = sink->status();
    EXPECT_EQ(st.delivered, 20u) << codec;
    EXPECT_EQ(st.failed + st.rejected + st.fallback_written + st.dropped, 0u) << codec;
    total += 20;
    std::set<std::string> ids;
    const auto msgs = topic_messages();
    ASSERT_EQ(msgs.size(), total) << codec;
    for (const auto& m : msgs) {
      if (request_id_of(m.value).starts_with(codec + "-")) ids.insert(request_id_of(m.value));
    }
    EXPECT_EQ(ids.size(), 20u) << codec;
  }
}

TEST_F(EventsTest, OneRequestsEventsShareAPartition) {
  auto sink = make();
  ASSERT_NE(sink, nullptr);
  for (int i = 0; i < 12; ++i) {
    const std::string id = "req-" + std::to_string(i);
    sink->consume(record(id, 429, Reason::rate_limited));
    sink->consume(completed(id));
  }
  ASSERT_TRUE(sink->flush(kWait));
  std::map<std::string, std::set<int>> partitions;
  for (const auto& m : topic_messages()) partitions[m.key].insert(m.partition);
  ASSERT_EQ(partitions.size(), 12u);
  std::set<int> used;
  for (const auto& [key, ps] : partitions) {
    EXPECT_EQ(ps.size(), 1u) << key;
    used.insert(*ps.begin());
  }
  EXPECT_GT(used.size(), 1u) << "keys should spread over partitions";
}

TEST_F(EventsTest, IncludeCompletedFalseSkipsOnlyCompleted) {
  settings_.include_completed = false;
  auto sink = make();
  ASSERT_NE(sink, nullptr);
  sink->consume(record("a", 200, Reason::ok));
  sink->consume(record("b", 429, Reason::rate_limited));
  sink->consume(record("c", 401, Reason::missing_key));
  sink->consume(record("d", 502, Reason::upstream_unreachable));
  sink->consume(record("e", 499, Reason::client_closed));  // served until the client left
  ASSERT_TRUE(sink->flush(kWait));
  std::set<std::string> types;
  for (const auto& m : topic_messages()) types.insert(str(m.value, "event"));
  EXPECT_EQ(types, (std::set<std::string>{"request.rate_limited", "request.auth_failed", "request.error"}));
  const auto st = sink->status();
  EXPECT_EQ(st.produced, 3u);
  EXPECT_EQ(st.delivered, 3u);
  EXPECT_EQ(st.skipped, 2u);
}

// What the access log hands over: a batch with each record's JSON (made again when not
// given); a skipped record in the middle does not stop the rest.
TEST_F(EventsTest, ABatchIsProducedRecordByRecord) {
  settings_.include_completed = false;
  auto sink = make();
  ASSERT_NE(sink, nullptr);
  const std::vector<telemetry::RequestRecord> batch = {
      record("b-1", 429, Reason::rate_limited), record("b-2", 200, Reason::ok), record("b-3", 401, Reason::missing_key)};
  const std::string given = telemetry::to_json(batch[0]);
  const std::vector<std::string_view> json = {given, given, {}};
  sink->consume_batch(batch, json);
  ASSERT_TRUE(sink->flush(kWait));
  std::map<std::string, std::string> types;
  for (const auto& m : topic_messages()) {
    types[request_id_of(m.value)] = str(m.value, "event");
    EXPECT_EQ(m.value.at("data").at("status").as_int64(), request_id_of(m.value) == "b-1" ? 429 : 401);
  }
  EXPECT_EQ(types, (std::map<std::string, std::string>{{"b-1", "request.rate_limited"}, {"b-3", "request.auth_failed"}}));
  const auto st = sink->status();
  EXPECT_EQ(st.produced, 2u);
  EXPECT_EQ(st.delivered, 2u);
  EXPECT_EQ(st.skipped, 1u);
}

// All brokers down while events keep coming, back a little later: everything is delivered
// exactly once (the idempotent producer retries) and `up` follows the outage.
TEST_F(EventsTest, OutageDrillDeliversEverythingOnce) {
  auto sink = make();
  ASSERT_NE(sink, nullptr);
  std::set<std::string> want;
  for (int i = 0; i < 5; ++i) {
    want.insert("before-" + std::to_string(i));
    sink->consume(completed("before-" + std::to_string(i)));
  }
  ASSERT_TRUE(sink->flush(kWait));
  ASSERT_TRUE(wait_until([&] { return sink->status().up; }));

  mock_.set_down();
  ASSERT_TRUE(wait_until([&] { return !sink->status().up; })) << "status never went down";
  constexpr int kDuring = 200;
  for (int i = 0; i < kDuring; ++i) {
    want.insert("during-" + std::to_string(i));
    sink->consume(record("during-" + std::to_string(i), 502, Reason::upstream_error));
  }
  // The outage's length is part of the drill, not a synchronisation: the producer keeps
  // failing to reconnect meanwhile, and nothing may be lost or duplicated because of it.
  std::this_thread::sleep_for(2s);
  EXPECT_GT(sink->status().queued, 0);
  EXPECT_EQ(sink->status().delivered, 5u);
  mock_.set_up();

  ASSERT_TRUE(sink->flush(kWait));
  ASSERT_TRUE(wait_until([&] { return sink->status().up; })) << "status never came back up";
  const auto msgs = topic_messages();
  std::multiset<std::string> got;
  std::set<std::string> envelope_ids;
  for (const auto& m : msgs) {
    got.insert(request_id_of(m.value));
    envelope_ids.insert(str(m.value, "id"));
  }
  EXPECT_EQ(msgs.size(), want.size()) << "missing or duplicated events";
  EXPECT_EQ(std::set<std::string>(got.begin(), got.end()), want);
  EXPECT_EQ(envelope_ids.size(), msgs.size()) << "duplicates";
  const auto st = sink->status();
  EXPECT_EQ(st.produced, want.size());
  EXPECT_EQ(st.delivered, want.size());
  EXPECT_EQ(st.failed + st.fallback_written + st.dropped, 0u);
}

// Down for longer than delivery_timeout: those events land in the fallback file with the
// reason; together with what was delivered, nothing is missing and nothing is in both.
TEST_F(EventsTest, DeliveryTimeoutDrillFillsTheFallbackFile) {
  settings_.delivery_timeout = 1500ms;
  auto sink = make();
  ASSERT_NE(sink, nullptr);
  std::set<std::string> want;
  for (int i = 0; i < 5; ++i) {
    want.insert("before-" + std::to_string(i));
    sink->consume(completed("before-" + std::to_string(i)));
  }
  ASSERT_TRUE(sink->flush(kWait));
  ASSERT_TRUE(wait_until([&] { return sink->status().up; }));

  mock_.set_down();
  ASSERT_TRUE(wait_until([&] { return !sink->status().up; }));
  constexpr int kDuring = 20;
  for (int i = 0; i < kDuring; ++i) {
    want.insert("lost-" + std::to_string(i));
    sink->consume(record("lost-" + std::to_string(i), 429, Reason::quota_exceeded));
  }
  ASSERT_TRUE(sink->flush(kWait)) << "delivery reports never came";
  mock_.set_up();

  const auto lines = read_fallback(settings_.fallback_file);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(kDuring));
  std::set<std::string> in_file;
  for (const auto& l : lines) {
    EXPECT_NE(str(l, "reason").find("_MSG_TIMED_OUT"), std::string::npos) << str(l, "reason");
    EXPECT_FALSE(str(l, "failed_at").empty());
    ASSERT_TRUE(l.contains("event") && l.at("event").is_object());
    EXPECT_EQ(str(l.at("event").as_object(), "event"), "request.rate_limited");
    in_file.insert(request_id_of(l.at("event").as_object()));
  }
  std::set<std::string> on_topic;
  for (const auto& m : topic_messages()) {
    const auto id = request_id_of(m.value);
    EXPECT_TRUE(on_topic.insert(id).second) << "duplicate " << id;
    EXPECT_FALSE(in_file.count(id)) << id << " both delivered and in the fallback file";
  }
  std::set<std::string> all = in_file;
  all.insert(on_topic.begin(), on_topic.end());
  EXPECT_EQ(all, want);

  // The producer recovers from the timeouts: later events are delivered again.
  for (int i = 0; i < 5; ++i) sink->consume(completed("after-" + std::to_string(i)));
  ASSERT_TRUE(sink->flush(kWait));
  std::set<std::string> after;
  for (const auto& m : topic_messages()) after.insert(request_id_of(m.value));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(after.count("after-" + std::to_string(i)));

  const auto st = sink->status();
  EXPECT_EQ(st.produced, want.size() + 5);
  EXPECT_EQ(st.failed, static_cast<std::uint64_t>(kDuring));
  EXPECT_EQ(st.delivered + st.fallback_written, st.produced);
  EXPECT_EQ(st.dropped, 0u);
  EXPECT_NE(st.last_error, "");
}

// A full producer queue refuses at once (never blocks); the refused events go to the file.
TEST_F(EventsTest, FullQueueGoesToTheFallbackFileAtOnce) {
  settings_.queue_messages = 3;
  auto sink = make_then_take_the_cluster_down();
  ASSERT_NE(sink, nullptr);
  std::set<std::string> want;
  for (int i = 0; i < 10; ++i) {
    want.insert("q-" + std::to_string(i));
    sink->consume(completed("q-" + std::to_string(i)));
  }
  auto st = sink->status();
  EXPECT_LE(st.produced, 3u);
  EXPECT_EQ(st.rejected, 10u - st.produced);
  EXPECT_EQ(st.fallback_written, st.rejected);
  mock_.set_up();
  ASSERT_TRUE(sink->flush(kWait));

  std::set<std::string> all;
  for (const auto& l : read_fallback(settings_.fallback_file)) {
    EXPECT_NE(str(l, "reason").find("_QUEUE_FULL"), std::string::npos) << str(l, "reason");
    all.insert(request_id_of(l.at("event").as_object()));
  }
  for (const auto& m : topic_messages()) EXPECT_TRUE(all.insert(request_id_of(m.value)).second);
  EXPECT_EQ(all, want);
}

// The operator replays the fallback file and moves it away while the gateway runs: later
// lines go to a new file at the path, none into the moved one.
TEST_F(EventsTest, AFallbackFileMovedAwayIsStartedAgain) {
  settings_.queue_messages = 1;
  auto sink = make_then_take_the_cluster_down();
  ASSERT_NE(sink, nullptr);
  for (int i = 0; i < 4; ++i) sink->consume(completed("m-" + std::to_string(i)));
  const auto first = sink->status().fallback_written;
  ASSERT_GE(first, 3u);
  const std::string moved = settings_.fallback_file + ".replayed";
  std::filesystem::rename(settings_.fallback_file, moved);
  for (int i = 4; i < 8; ++i) sink->consume(completed("m-" + std::to_string(i)));
  EXPECT_EQ(read_fallback(moved).size(), first);
  const auto fresh = read_fallback(settings_.fallback_file);
  EXPECT_EQ(fresh.size(), sink->status().fallback_written - first);
  ASSERT_FALSE(fresh.empty());
  for (const auto& l : fresh) {
    const auto id = request_id_of(l.at("event").as_object());
    EXPECT_GE(std::stoi(id.substr(2)), 4) << id << " should have gone to the moved file";
  }
  mock_.set_up();
  ASSERT_TRUE(sink->flush(kWait));
}

// A long outage cannot fill the disk: past fallback_max_bytes, events are dropped and
// counted, and the file stays under the limit.
TEST_F(EventsTest, TheFallbackFileStopsAtItsLimit) {
  settings_.queue_messages = 1;
  settings_.fallback_max_bytes = 2000;  // a few lines
  auto sink = make_then_take_the_cluster_down();
  ASSERT_NE(sink, nullptr);
  for (int i = 0; i < 30; ++i) sink->consume(completed("f-" + std::to_string(i)));
  const auto st = sink->status();
  EXPECT_GT(st.fallback_written, 0u);
  EXPECT_GT(st.dropped, 0u);
  EXPECT_EQ(st.rejected, st.fallback_written + st.dropped);
  EXPECT_LE(std::filesystem::file_size(settings_.fallback_file), 2000u);
  // Moved away (replayed): writing resumes.
  std::filesystem::rename(settings_.fallback_file, settings_.fallback_file + ".1");
  sink->consume(completed("f-after"));
  EXPECT_EQ(read_fallback(settings_.fallback_file).size(), 1u);
  mock_.set_up();
  ASSERT_TRUE(sink->flush(kWait));
}

// A fatal idempotent-producer error: the producer is recreated, what the old one held goes
// to the fallback file, and later events flow again.
TEST_F(EventsTest, FatalErrorRecreatesTheProducer) {
  auto sink = make_then_take_the_cluster_down();
  ASSERT_NE(sink, nullptr);
  std::set<std::string> want;
  for (int i = 0; i < 5; ++i) {
    want.insert("held-" + std::to_string(i));
    sink->consume(completed("held-" + std::to_string(i)));
  }
  ASSERT_TRUE(events::TestAccess::raise_fatal(*sink));
  ASSERT_TRUE(wait_until([&] { return sink->status().restarts == 1; }));
  mock_.set_up();
  for (int i = 0; i < 5; ++i) {
    want.insert("after-" + std::to_string(i));
    sink->consume(completed("after-" + std::to_string(i)));
  }
  ASSERT_TRUE(sink->flush(kWait));

  std::set<std::string> in_file, on_topic;
  for (const auto& l : read_fallback(settings_.fallback_file)) {
    std::string reason = str(l, "reason");
    for (auto& c : reason) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_NE(reason.find("fatal"), std::string::npos) << reason;
    in_file.insert(request_id_of(l.at("event").as_object()));
  }
  for (const auto& m : topic_messages()) {
    const auto id = request_id_of(m.value);
    EXPECT_TRUE(on_topic.insert(id).second) << "duplicate " << id;
    EXPECT_FALSE(in_file.count(id)) << id;
  }
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(on_topic.count("after-" + std::to_string(i)));
  std::set<std::string> all = in_file;
  all.insert(on_topic.begin(), on_topic.end());
  EXPECT_EQ(all, want);
  EXPECT_NE(sink->status().last_error, "");
}

// A fatal error while events are in flight to a broker that answers late: the old
// producer's events are all accounted for, delivered or in the fallback file; any whose
// report had not come when it was closed (after 2 s: librdkafka reports nothing after
// that) would be counted as dropped, so that a flush never waits for them forever.
TEST_F(EventsTest, EventsInFlightWhenTheProducerIsReplacedAreAccountedFor) {
  auto sink = make();
  ASSERT_NE(sink, nullptr);
  sink->consume(completed("first"));
  ASSERT_TRUE(sink->flush(kWait));  // connected: the next ones go out at once
  mock_.set_rtt(8000);
  for (int i = 0; i < 5; ++i) sink->consume(completed("slow-" + std::to_string(i)));
  std::this_thread::sleep_for(500ms);  // sent (linger 5 ms), unanswered
  ASSERT_TRUE(events::TestAccess::raise_fatal(*sink));
  ASSERT_TRUE(wait_until([&] { return sink->status().restarts == 1; }));
  mock_.set_rtt(0);
  ASSERT_TRUE(sink->flush(kWait)) << "never settled: " << sink->status().last_error;
  const auto st = sink->status();
  EXPECT_EQ(st.produced, 6u);
  EXPECT_EQ(st.delivered + st.fallback_written + st.dropped, st.produced);
  EXPECT_EQ(st.delivered + st.failed, st.produced);
  EXPECT_GE(st.fallback_written + st.dropped, 5u) << "the slow ones were not delivered";
  // They had been sent: the broker may have them, and their lines say so.
  const auto lines = read_fallback(settings_.fallback_file);
  EXPECT_EQ(lines.size(), st.fallback_written);
  for (const auto& l : lines) {
    EXPECT_NE(str(l, "reason").find("(possibly delivered)"), std::string::npos) << str(l, "reason");
  }
}

// Kafka unreachable at start is not an error; what is still undelivered at shutdown is
// written to the fallback file with reason "shutdown".
TEST_F(EventsTest, UnreachableAtStartThenShutdownUsesTheFallbackFile) {
  settings_.brokers = "127.0.0.1:" + std::to_string(closed_port());
  auto sink = make();
  ASSERT_NE(sink, nullptr);
  sink->consume(record("r-1", 429, Reason::rate_limited));
  sink->consume(completed("r-2"));
  auto st = sink->status();
  EXPECT_FALSE(st.up);
  EXPECT_EQ(st.produced, 2u);
  EXPECT_FALSE(sink->flush(50ms));
  sink.reset();

  const auto lines = read_fallback(settings_.fallback_file);
  ASSERT_EQ(lines.size(), 2u);
  std::set<std::string> ids;
  for (const auto& l : lines) {
    EXPECT_EQ(str(l, "reason"), "shutdown");
    ids.insert(request_id_of(l.at("event").as_object()));
  }
  EXPECT_EQ(ids, (std::set<std::string>{"r-1", "r-2"}));
}

}  // namespace
