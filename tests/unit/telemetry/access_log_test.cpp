#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/parse.hpp>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <fstream>
#include <iterator>
#include <sstream>
#include <span>
#include <string>
#include <vector>

#include "telemetry/access_log.hpp"

using namespace sluice;
using namespace sluice::telemetry;

namespace {
RequestRecord sample(int i) {
  RequestRecord r;
  r.unix_ms = 1700000000123;
  r.request_id = "req-" + std::to_string(i);
  r.key_masked = "sk-prod-***1a2b";
  r.key_name = "prod";
  r.tenant = "acme";
  r.tier = "premium";
  r.alias = "demo";
  r.model = "llama3";
  r.status = 200;
  r.stream = true;
  r.ttft_ms = 12.34;
  r.prompt_tokens = 7;
  r.completion_tokens = -1;
  r.error = "quote \" and newline \n";
  return r;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}
}  // namespace

TEST(RecordJson, IsValidJsonWithNullsForUnknowns) {
  auto v = boost::json::parse(to_json(sample(1))).as_object();
  EXPECT_EQ(v.at("time").as_string(), "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(v.at("request_id").as_string(), "req-1");
  EXPECT_EQ(v.at("key_id").as_string(), "sk-prod-***1a2b");
  EXPECT_EQ(v.at("status").as_int64(), 200);
  EXPECT_EQ(v.at("reason").as_string(), "ok");
  EXPECT_TRUE(v.at("stream").as_bool());
  EXPECT_DOUBLE_EQ(v.at("ttft_ms").as_double(), 12.3);
  EXPECT_TRUE(v.at("completion_tokens").is_null());
  EXPECT_TRUE(v.at("tokens_per_s").is_null());
  EXPECT_EQ(v.at("error").as_string(), "quote \" and newline \n");
}

// What a client controls stays valid JSON: numbers too large for one decimal, infinity
// (Boost.JSON reads 1e400 as one), and bytes that are not UTF-8 in the path or the error.
TEST(RecordJson, StaysValidJsonWhateverTheClientSent) {
  RequestRecord r = sample(2);
  r.temperature = 1e30;
  r.top_p = std::numeric_limits<double>::infinity();
  r.wall_ms = std::numeric_limits<double>::quiet_NaN();
  r.path = "/v1/\xFF\xFE?q=caf\xC3\xA9";
  r.error = "upstream said: \xE2\x82";  // cut inside a character
  const std::string line = to_json(r);
  boost::system::error_code ec;
  const auto v = boost::json::parse(line, ec);  // refuses invalid UTF-8, inf, empty values
  ASSERT_FALSE(ec) << ec.message() << ": " << line;
  const auto& o = v.as_object();
  EXPECT_DOUBLE_EQ(o.at("temperature").to_number<double>(), 1e30);
  EXPECT_TRUE(o.at("top_p").is_null());
  EXPECT_TRUE(o.at("wall_ms").is_null());
  EXPECT_EQ(o.at("path").as_string(), "/v1/\xEF\xBF\xBD\xEF\xBF\xBD?q=caf\xC3\xA9");
  EXPECT_EQ(o.at("error").as_string(), "upstream said: \xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(AccessLog, WritesEveryRecordAsOneLine) {
  auto path = (std::filesystem::temp_directory_path() / ("sluice-al-" + std::to_string(::getpid()) + ".log")).string();
  std::remove(path.c_str());
  {
    AccessLog log(path);
    for (int i = 0; i < 500; ++i) log.submit(sample(i));
    log.flush();
    EXPECT_EQ(log.written(), 500u);
    EXPECT_EQ(log.dropped(), 0u);
  }
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 500u);
  EXPECT_EQ(boost::json::parse(lines[499]).as_object().at("request_id").as_string(), "req-499");
  std::remove(path.c_str());
}

TEST(AccessLog, FullQueueDropsAndCounts) {
  auto path = (std::filesystem::temp_directory_path() / ("sluice-al2-" + std::to_string(::getpid()) + ".log")).string();
  std::remove(path.c_str());
  std::uint64_t written = 0, dropped = 0;
  {
    AccessLog log(path, /*capacity=*/4);
    // The writer drains at most every poll interval, so a burst past the capacity drops.
    for (int i = 0; i < 1000; ++i) log.submit(sample(i));
    log.flush();
    written = log.written();
    dropped = log.dropped();
  }
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(written + dropped, 1000u);
  EXPECT_EQ(read_lines(path).size(), written);
  std::remove(path.c_str());
}

// The writer thread runs at nice 10 (common/thread_name.hpp): its batches give way to the
// workers. Found by its name among this process's threads once the log has written.
TEST(AccessLog, TheWriterThreadRunsAtALowerPriority) {
  auto path = (std::filesystem::temp_directory_path() / ("sluice-al3-" + std::to_string(::getpid()) + ".log")).string();
  std::remove(path.c_str());
  AccessLog log(path);
  log.submit(sample(1));
  log.flush();  // the writer has run
  int nice = -100;
  for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(t.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "sluice-log") continue;
    std::ifstream stat(t.path() / "stat");
    std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    // Fields after the name's closing parenthesis: state is the 3rd field, nice the 19th.
    std::istringstream rest(all.substr(all.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 19 && rest >> field; ++i) {
      if (i == 19) nice = std::stoi(field);
    }
  }
  // (Nice 10, or the test's own if it already runs lower.)
  const int own = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  EXPECT_EQ(nice, std::max(10, own));
  std::remove(path.c_str());
}

TEST(AccessLog, EmptyPathIsOff) {
  AccessLog log("");
  EXPECT_FALSE(log.enabled());
  log.submit(sample(1));
  EXPECT_EQ(log.written(), 0u);
}

namespace {
// Keeps what it is handed.
struct KeepingSink : RecordSink {
  std::vector<std::string> ids, jsons;
  int without_json = 0;
  void consume(const RequestRecord& r) override {
    ++without_json;
    ids.push_back(r.request_id);
  }
  void consume(const RequestRecord& r, std::string_view json) override {
    ids.push_back(r.request_id);
    jsons.emplace_back(json);
  }
};
}  // namespace

namespace {
// Takes batches whole, as the history and the event sink do.
struct BatchSink : RecordSink {
  std::vector<std::string> ids, jsons;
  int single = 0, batches = 0;
  void consume(const RequestRecord&) override { ++single; }
  void consume_batch(std::span<const RequestRecord> records, std::span<const std::string_view> json) override {
    ++batches;
    EXPECT_EQ(records.size(), json.size());
    for (std::size_t i = 0; i < records.size(); ++i) {
      ids.push_back(records[i].request_id);
      jsons.emplace_back(json[i]);
    }
  }
};
}  // namespace

TEST(AccessLog, ABatchSinkGetsEveryRecordInOrderWithItsJson) {
  BatchSink sink;
  {
    AccessLog log("", 1024, {&sink});
    for (int i = 0; i < 50; ++i) log.submit(sample(i));
    log.flush();
    for (int i = 50; i < 60; ++i) log.submit(sample(i));
  }  // the destructor hands over the rest
  EXPECT_EQ(sink.single, 0);
  EXPECT_GE(sink.batches, 1);
  ASSERT_EQ(sink.ids.size(), 60u);
  for (int i = 0; i < 60; ++i) {
    EXPECT_EQ(sink.ids[static_cast<std::size_t>(i)], "req-" + std::to_string(i));
    EXPECT_EQ(sink.jsons[static_cast<std::size_t>(i)], to_json(sample(i)));
  }
}

TEST(AccessLog, SinksGetEveryRecordWithItsJsonWhetherTheLogIsOnOrOff) {
  const auto path = (std::filesystem::temp_directory_path() / "sluice-sinks-test.log").string();
  std::filesystem::remove(path);
  for (const std::string& target : {path, std::string()}) {
    KeepingSink a, b;
    {
      AccessLog log(target, 1024, {&a, &b});
      EXPECT_TRUE(log.active());
      for (int i = 0; i < 50; ++i) log.submit(sample(i));
      log.flush();
    }
    for (const KeepingSink* s : {&a, &b}) {
      ASSERT_EQ(s->ids.size(), 50u) << target;
      EXPECT_EQ(s->without_json, 0);
      for (int i = 0; i < 50; ++i) {
        EXPECT_EQ(s->ids[static_cast<std::size_t>(i)], "req-" + std::to_string(i));
        // Exactly the record's JSON object, the log line without its newline.
        EXPECT_EQ(s->jsons[static_cast<std::size_t>(i)], to_json(sample(i)));
      }
    }
  }
  EXPECT_EQ(read_lines(path).size(), 50u);
  std::filesystem::remove(path);
}

TEST(AccessLog, RecordsKeptFromTheSinksAreLoggedButNeverHandedOn) {
  const auto path = (std::filesystem::temp_directory_path() / "sluice-to-sinks-test.log").string();
  std::filesystem::remove(path);
  BatchSink sink;
  {
    AccessLog log(path, 1024, {&sink});
    for (int i = 0; i < 30; ++i) {
      RequestRecord r = sample(i);
      r.to_sinks = i % 3 != 1;  // every third one is a query of the history
      log.submit(std::move(r));
    }
    log.flush();
    RequestRecord only = sample(30);  // a batch with nothing for the sinks
    only.to_sinks = false;
    log.submit(std::move(only));
  }
  std::vector<std::string> expected;
  for (int i = 0; i < 30; ++i)
    if (i % 3 != 1) expected.push_back("req-" + std::to_string(i));
  EXPECT_EQ(sink.ids, expected);
  ASSERT_EQ(sink.jsons.size(), expected.size());
  for (std::size_t k = 0; k < expected.size(); ++k) {
    const int i = std::stoi(expected[k].substr(4));
    EXPECT_EQ(sink.jsons[k], to_json(sample(i)));  // each record with its own JSON
  }
  EXPECT_EQ(read_lines(path).size(), 31u);  // the log keeps every line
  std::filesystem::remove(path);
}
