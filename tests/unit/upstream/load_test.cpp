// A model server's load signals read from what it publishes (upstream/load.hpp).
#include <gtest/gtest.h>

#include "upstream/load.hpp"

using namespace sluice::upstream;

TEST(LoadSignals, VllmMetrics) {
  const char* text =
      "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"a{b}\"} 3.0\n"
      "vllm:num_requests_running{engine=\"1\",model_name=\"x\"} 2.0\n"
      "vllm:num_requests_waiting{model_name=\"x\"} 7 1700000000000\r\n"
      "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"
      "vllm:kv_cache_usage_perc{engine=\"1\"} 0.91\n"
      "vllm:gpu_cache_usage_perc 0.2\n"
      "vllm:num_requests_running_something_else 99\n";
  auto r = read_vllm_metrics(text);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->running, 5);
  EXPECT_EQ(r->waiting, 7);
  EXPECT_DOUBLE_EQ(r->kv, 0.91) << "the fullest engine";
  // An older vLLM names the KV cache gpu_cache_usage_perc.
  EXPECT_DOUBLE_EQ(read_vllm_metrics("vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.3\n")->kv, 0.3);
  EXPECT_FALSE(read_vllm_metrics("process_cpu_seconds_total 1\n"));
  EXPECT_FALSE(read_vllm_metrics(""));
  EXPECT_FALSE(read_vllm_metrics("vllm:kv_cache_usage_perc{x=\"1\"} NaN\n"));
  EXPECT_FALSE(read_vllm_metrics("<html>not metrics</html>"));
  // Counts beyond any real queue (or a sum that overflows) are clamped, never undefined.
  auto huge = read_vllm_metrics("vllm:num_requests_waiting 8.8e51\nvllm:num_requests_running -4\n"
                                "vllm:num_requests_waiting 1.7e308\nvllm:num_requests_waiting 1.7e308\n");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->waiting, 1'000'000'000'000);
  EXPECT_EQ(huge->running, 0);
}

TEST(LoadSignals, OllamaPs) {
  auto r = read_ollama_ps(R"({"models":[{"name":"a","size_vram":3000},{"name":"b","size_vram":1000}]})", 8000);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->kv, 0.5);
  EXPECT_EQ(r->running, 2);
  EXPECT_DOUBLE_EQ(read_ollama_ps(R"({"models":[]})", 8000)->kv, 0.0);
  EXPECT_FALSE(read_ollama_ps("[]", 8000));
  EXPECT_FALSE(read_ollama_ps(R"({"models":[]})", 0));
}

TEST(LoadSignals, AnOldReadingSaysNothing) {
  Load l;
  const auto t0 = Load::Clock::now();
  EXPECT_FALSE(l.get(t0, std::chrono::seconds(1)));
  l.set(LoadReading{.kv = 0.9, .running = 1, .waiting = 0}, t0);
  ASSERT_TRUE(l.get(t0 + std::chrono::milliseconds(500), std::chrono::seconds(1)));
  EXPECT_FALSE(l.get(t0 + std::chrono::seconds(2), std::chrono::seconds(1)));
  EXPECT_EQ(l.reads(), 1u);
}
