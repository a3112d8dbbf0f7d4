#include "telemetry/metrics.hpp"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <thread>

#include "common/event_backend.hpp"

using namespace sluice;
using namespace sluice::telemetry;

namespace {

// Sample lines of a Prometheus text page: "name{labels}" -> value.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

RequestRecord request(int status, Reason reason, double wall_ms, double ttft_ms = -1, bool stream = false) {
  RequestRecord r;
  r.status = status;
  r.reason = reason;
  r.wall_ms = wall_ms;
  r.ttft_ms = ttft_ms;
  r.stream = stream;
  r.prompt_tokens = 10;
  r.completion_tokens = 5;
  return r;
}

}  // namespace

TEST(Metrics, WorkersAreSummedByLabels) {
  Metrics m({"chat", "embed"}, {"gold", "free"}, {"10.0.0.1:8000"});
  auto& a = m.add_worker();
  auto& b = m.add_worker();
  a.record(request(200, Reason::ok, 30, 12, true), m.model_index("chat"), m.tier_index("gold"));
  b.record(request(200, Reason::ok, 700, 20, true), m.model_index("chat"), m.tier_index("gold"));
  b.record(request(429, Reason::rate_limited, 1), m.model_index("chat"), m.tier_index("free"));
  a.record(request(401, Reason::missing_key, 1), -1, -1);
  std::string text;
  m.render(text);
  auto s = samples(text);
  EXPECT_EQ(s[R"(sluice_requests_total{model="chat",tier="gold",status="200",reason="ok",stream="true"})"], 2);
  EXPECT_EQ(s[R"(sluice_requests_total{model="chat",tier="free",status="429",reason="rate_limit_exceeded",stream="false"})"], 1);
  EXPECT_EQ(s[R"(sluice_requests_total{model="",tier="",status="401",reason="missing_api_key",stream="false"})"], 1);
  // Histograms are cumulative: 30 ms falls in le=0.05, 700 ms in le=1.
  EXPECT_EQ(s[R"(sluice_request_duration_seconds_bucket{model="chat",le="0.025"})"], 1);  // the 429 (1 ms)
  EXPECT_EQ(s[R"(sluice_request_duration_seconds_bucket{model="chat",le="0.05"})"], 2);
  EXPECT_EQ(s[R"(sluice_request_duration_seconds_bucket{model="chat",le="0.5"})"], 2);
  EXPECT_EQ(s[R"(sluice_request_duration_seconds_bucket{model="chat",le="1"})"], 3);
  EXPECT_EQ(s[R"(sluice_request_duration_seconds_bucket{model="chat",le="+Inf"})"], 3);
  EXPECT_EQ(s[R"(sluice_request_duration_seconds_count{model="chat"})"], 3);
  EXPECT_NEAR(s[R"(sluice_request_duration_seconds_sum{model="chat"})"], 0.731, 1e-9);
  EXPECT_EQ(s[R"(sluice_ttft_seconds_count{model="chat"})"], 2);  // only requests with a first token
  EXPECT_EQ(s[R"(sluice_ttft_seconds_bucket{model="chat",le="0.01"})"], 0);
  EXPECT_EQ(s[R"(sluice_ttft_seconds_bucket{model="chat",le="0.025"})"], 2);
  EXPECT_EQ(s[R"(sluice_prompt_tokens_total{model="chat"})"], 30);
  EXPECT_EQ(s[R"(sluice_completion_tokens_total{model="chat"})"], 15);
  EXPECT_EQ(s[R"(sluice_prompt_tokens_total{model="embed"})"], 0);
}

TEST(Metrics, InFlightAndUpstreams) {
  Metrics m({"chat"}, {}, {"a:1", "b:2"});
  auto& w = m.add_worker();
  w.request_started();
  w.request_started();
  w.upstream_started(m.backend_index("b:2"));
  w.upstream_started(m.backend_index("b:2"));
  w.upstream_finished(m.backend_index("b:2"), true, 0.2);
  w.upstream_started(99);  // out of range: ignored
  std::string text;
  m.render(text);
  auto s = samples(text);
  EXPECT_EQ(s["sluice_requests_in_flight"], 2);
  EXPECT_EQ(s[R"(sluice_upstream_in_flight{backend="b:2"})"], 1);
  EXPECT_EQ(s[R"(sluice_upstream_in_flight{backend="a:1"})"], 0);
  EXPECT_EQ(s[R"(sluice_upstream_requests_total{backend="b:2"})"], 1);
  EXPECT_EQ(s[R"(sluice_upstream_errors_total{backend="b:2"})"], 1);
  EXPECT_EQ(s[R"(sluice_upstream_duration_seconds_bucket{backend="b:2",le="0.25"})"], 1);
  EXPECT_EQ(s[R"(sluice_upstream_duration_seconds_bucket{backend="b:2",le="0.1"})"], 0);
  w.request_finished();
  w.request_finished();
  text.clear();
  m.render(text);
  EXPECT_EQ(samples(text)["sluice_requests_in_flight"], 0);
}

TEST(Metrics, LabelValuesAreEscaped) {
  Metrics m({"we\"ird\\model"}, {}, {});
  auto& w = m.add_worker();
  w.record(request(200, Reason::ok, 5), 0, -1);
  std::string text;
  m.render(text);
  EXPECT_NE(text.find(R"(model="we\"ird\\model")"), std::string::npos) << text;
}

TEST(Metrics, ScrapeWhileWorkersRecord) {
  Metrics m({"chat"}, {"t"}, {"a:1"});
  auto& a = m.add_worker();
  auto& b = m.add_worker();
  constexpr int kEach = 20000;
  auto run = [&](Metrics::Worker& w) {
    for (int i = 0; i < kEach; ++i) {
      w.request_started();
      w.request_finished();
      w.record(request(200, Reason::ok, 3), 0, 0);
    }
  };
  std::thread ta(run, std::ref(a)), tb(run, std::ref(b));
  for (int i = 0; i < 50; ++i) {
    std::string text;
    m.render(text);  // never torn: counts only grow
  }
  ta.join();
  tb.join();
  std::string text;
  m.render(text);
  auto s = samples(text);
  EXPECT_EQ(s[R"(sluice_requests_total{model="chat",tier="t",status="200",reason="ok",stream="false"})"], 2 * kEach);
  EXPECT_EQ(s["sluice_requests_in_flight"], 0);
}

TEST(Metrics, ProcessFiguresAreRead) {
  std::string text;
  render_process_metrics(text, "1.2.3");
  auto s = samples(text);
  EXPECT_EQ(s[R"(sluice_build_info{version="1.2.3",compiler=")" + std::string(__VERSION__) +
              R"(",event_backend=")" + sluice::common::event_backend() + "\"}"],
            1);
  EXPECT_GT(s["process_resident_memory_bytes"], 0);
  EXPECT_GT(s["process_open_fds"], 2);  // at least stdin, stdout, stderr
  EXPECT_GT(s["process_start_time_seconds"], 1.6e9);
}

TEST(Metrics, NoGpuMeansZeroDevices) {
  std::string text;
  render_gpu_metrics(text);
  auto s = samples(text);
  ASSERT_TRUE(s.count("sluice_gpu_devices"));
  // Where NVML is present the per-device figures follow; where not, nothing else.
  if (s["sluice_gpu_devices"] == 0) {
    EXPECT_EQ(text.find("sluice_gpu_utilization_ratio"), std::string::npos);
  }
}
