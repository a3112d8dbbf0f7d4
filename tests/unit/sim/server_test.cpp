// End to end: SimServer on an ephemeral port, spoken to over plain POSIX sockets.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include "sse_frames.hpp"
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sim/answer.hpp"
#include "sim/embeddings.hpp"
#include "sim/engine.hpp"
#include "sim/sim.hpp"
#include "vectors.hpp"

using namespace sluice;
using namespace sluice::sim;
namespace json = boost::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// A minimal blocking HTTP/1.1 client: one request per connection.
class Conn {
 public:
  explicit Conn(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket");
    timeval tv{15, 0};  // a stuck test fails instead of hanging
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect");
  }
  ~Conn() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void send_request(std::string_view method, std::string_view path, std::string_view body = {},
                    const std::vector<std::string>& headers = {}) {
    std::string req = std::string(method) + " " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    for (const auto& h : headers) req += h + "\r\n";
    if (!body.empty() || method == "POST") {
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    }
    req += "Connection: close\r\n\r\n";
    req += body;
    std::size_t off = 0;
    while (off < req.size()) {
      ssize_t n = ::send(fd_, req.data() + off, req.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send");
      off += static_cast<std::size_t>(n);
    }
  }

  struct Head {
    int status = 0;
    std::map<std::string, std::string> headers;  // lower-case names
    bool chunked() const {
      auto it = headers.find("transfer-encoding");
      return it != headers.end() && it->second == "chunked";
    }
  };

  Head read_head() {
    std::string h;
    while (true) {
      auto end = buf_.find("\r\n\r\n");
      if (end != std::string::npos) {
        h = buf_.substr(0, end);
        buf_.erase(0, end + 4);
        break;
      }
      if (!fill()) throw std::runtime_error("EOF before the response head");
    }
    Head head;
    std::size_t pos = h.find("\r\n");
    std::string status_line = h.substr(0, pos);
    head.status = std::stoi(status_line.substr(9, 3));
    while (pos != std::string::npos) {
      std::size_t next = h.find("\r\n", pos + 2);
      std::string line = h.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        head.headers[name] = value;
      }
      pos = next;
    }
    return head;
  }

  // Next chunk of a chunked body; nullopt at the terminating chunk. Sets eof when the
  // connection ended first.
  std::optional<std::string> read_chunk(bool& eof) {
    eof = false;
    std::size_t nl;
    while ((nl = buf_.find("\r\n")) == std::string::npos) {
      if (!fill()) {
        eof = true;
        return std::nullopt;
      }
    }
    const std::size_t size = std::stoul(buf_.substr(0, nl), nullptr, 16);
    buf_.erase(0, nl + 2);
    while (buf_.size() < size + 2) {
      if (!fill()) {
        eof = true;
        return std::nullopt;
      }
    }
    std::string data = buf_.substr(0, size);
    buf_.erase(0, size + 2);
    if (size == 0) return std::nullopt;
    return data;
  }

  std::string read_body(const Head& h) {
    if (h.chunked()) {
      std::string all;
      bool eof = false;
      while (auto c = read_chunk(eof)) all += *c;
      if (eof) throw std::runtime_error("chunked body ended without its last chunk");
      return all;
    }
    std::size_t len = std::stoul(h.headers.at("content-length"));
    while (buf_.size() < len) {
      if (!fill()) throw std::runtime_error("EOF in body");
    }
    std::string b = buf_.substr(0, len);
    buf_.erase(0, len);
    return b;
  }

  // True when the peer closed (read returns 0 or an error other than a timeout).
  bool at_eof() {
    while (true) {
      if (!buf_.empty()) return false;
      char c[512];
      ssize_t n = ::recv(fd_, c, sizeof c, 0);
      if (n > 0) {
        buf_.append(c, static_cast<std::size_t>(n));
        return false;
      }
      return true;
    }
  }

 private:
  bool fill() {
    char c[4096];
    ssize_t n = ::recv(fd_, c, sizeof c, 0);
    if (n <= 0) return false;
    buf_.append(c, static_cast<std::size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buf_;
};

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
  std::vector<std::string> chunks;  // for chunked replies, each HTTP chunk
};

Reply call(std::uint16_t port, std::string_view method, std::string_view path, std::string_view body = {},
           const std::vector<std::string>& headers = {}) {
  Conn c(port);
  c.send_request(method, path, body, headers);
  auto h = c.read_head();
  Reply r;
  r.status = h.status;
  r.headers = h.headers;
  if (h.chunked()) {
    bool eof = false;
    while (auto ch = c.read_chunk(eof)) {
      r.chunks.push_back(*ch);
      r.body += *ch;
    }
    if (eof) throw std::runtime_error("chunked body ended without its last chunk");
  } else {
    r.body = c.read_body(h);
  }
  return r;
}

// The chunks of a stream that the server drops (the abort fault), which must end without
// its terminating chunk.
std::vector<std::string> dropped_stream(std::uint16_t port, std::string_view path, std::string_view body,
                                        const std::string& fault) {
  Conn c(port);
  c.send_request("POST", path, body, {"x-sim-fault: " + fault});
  EXPECT_EQ(c.read_head().status, 200);
  bool eof = false;
  std::vector<std::string> chunks;
  while (auto ch = c.read_chunk(eof)) chunks.push_back(*ch);
  EXPECT_TRUE(eof) << "the stream must end without its terminating chunk";
  return chunks;
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit = 10s) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

using sluice::sim::testing::sse_frames;

config::SimSettings fast() {
  config::SimSettings s;
  s.ttft = 5ms;
  s.inter_token = 1ms;
  s.jitter = 0;
  s.default_output_tokens = 6;
  s.seed = 7;
  return s;
}

class SimServerTest : public ::testing::Test {
 protected:
  void start(config::SimSettings s = fast(), int workers = 2) {
    SimServerOptions o;
    o.settings = s;
    o.workers = workers;
    o.models = {"sim-a", "sim-b"};
    server_ = SimServer::start(o);
    port_ = server_->port();
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    if (server_) {
      server_->shutdown(200ms);
      server_->join();
    }
  }
  std::unique_ptr<SimServer> server_;
  std::uint16_t port_ = 0;
};

const char* kOpenAi = R"({"model":"gpt-sim","messages":[{"role":"user","content":"hello there, simulator"}]})";

std::string openai_body(int max_tokens, bool stream, bool usage = false) {
  std::string b = R"({"model":"gpt-sim","messages":[{"role":"user","content":"hello there, simulator"}],"max_tokens":)" +
                  std::to_string(max_tokens);
  if (stream) b += R"(,"stream":true)";
  if (usage) b += R"(,"stream_options":{"include_usage":true})";
  return b + "}";
}

}  // namespace

TEST_F(SimServerTest, HealthModelsTagsAndUnknownPath) {
  start();
  auto h = call(port_, "GET", "/health");
  EXPECT_EQ(h.status, 200);

  auto m = call(port_, "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  auto data = json::parse(m.body).as_object().at("data").as_array();
  ASSERT_EQ(data.size(), 2u);
  EXPECT_EQ(data[1].as_object().at("id").as_string(), "sim-b");

  auto t = call(port_, "GET", "/api/tags");
  ASSERT_EQ(t.status, 200);
  EXPECT_EQ(json::parse(t.body).as_object().at("models").as_array()[0].as_object().at("name").as_string(), "sim-a");

  EXPECT_EQ(call(port_, "GET", "/nope").status, 404);
  EXPECT_EQ(call(port_, "GET", "/v1/chat/completions").status, 405);
  EXPECT_EQ(server_->stats().requests, 0u);
}

TEST_F(SimServerTest, OpenAiNonStream) {
  start();
  auto r = call(port_, "POST", "/v1/chat/completions", openai_body(3, false));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.headers["content-type"].starts_with("application/json"));
  auto b = json::parse(r.body).as_object();
  EXPECT_EQ(b.at("model").as_string(), "gpt-sim");  // any model is accepted and echoed
  auto ch = b.at("choices").as_array()[0].as_object();
  EXPECT_EQ(ch.at("message").as_object().at("content").as_string(), sim_text(3));
  EXPECT_EQ(ch.at("finish_reason").as_string(), "length");
  auto u = b.at("usage").as_object();
  EXPECT_EQ(u.at("completion_tokens").as_int64(), 3);
  EXPECT_EQ(u.at("prompt_tokens").as_int64(), 5);  // 22 bytes / 4

  // No limit: default_output_tokens, finish "stop".
  r = call(port_, "POST", "/v1/chat/completions", kOpenAi);
  b = json::parse(r.body).as_object();
  EXPECT_EQ(b.at("usage").as_object().at("completion_tokens").as_int64(), 6);
  EXPECT_EQ(b.at("choices").as_array()[0].as_object().at("finish_reason").as_string(), "stop");

  ASSERT_TRUE(wait_until([&] { return server_->stats().completed == 2u; }));
  auto st = server_->stats();
  EXPECT_EQ(st.requests, 2u);
  EXPECT_EQ(st.cancelled, 0u);
}

TEST_F(SimServerTest, OpenAiStreamOneChunkPerToken) {
  start();
  auto r = call(port_, "POST", "/v1/chat/completions", openai_body(4, true, true));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  // 4 token chunks, then one chunk with finish + usage + [DONE].
  ASSERT_EQ(r.chunks.size(), 5u);
  std::string content;
  for (int i = 0; i < 4; ++i) {
    auto fs = sse_frames(r.chunks[i]);
    ASSERT_EQ(fs.size(), 1u);
    auto delta = json::parse(fs[0].data).as_object().at("choices").as_array()[0].as_object().at("delta").as_object();
    EXPECT_EQ(delta.contains("role"), i == 0);
    content += delta.at("content").as_string();
  }
  EXPECT_EQ(content, sim_text(4));
  auto tail = sse_frames(r.chunks[4]);
  ASSERT_EQ(tail.size(), 3u);
  EXPECT_EQ(json::parse(tail[0].data).as_object().at("choices").as_array()[0].as_object().at("finish_reason").as_string(), "length");
  EXPECT_EQ(json::parse(tail[1].data).as_object().at("usage").as_object().at("completion_tokens").as_int64(), 4);
  EXPECT_EQ(tail[2].data, "[DONE]");
  EXPECT_TRUE(wait_until([&] { return server_->stats().completed == 1u; }));
}

TEST_F(SimServerTest, OllamaStreamAndNonStream) {
  start();
  auto r = call(port_, "POST", "/api/chat",
                R"({"model":"llama3","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":3}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "application/x-ndjson");
  ASSERT_EQ(r.chunks.size(), 4u);  // stream is the default for /api/chat
  std::string streamed;
  for (int i = 0; i < 3; ++i) {
    auto o = json::parse(r.chunks[i]).as_object();
    EXPECT_FALSE(o.at("done").as_bool());
    const auto piece = o.at("message").as_object().at("content").as_string();
    EXPECT_EQ(piece.size() > 0 && piece[0] == ' ', i > 0) << piece;  // one word per line
    streamed += piece;
  }
  EXPECT_EQ(streamed, sim_text(3));
  auto fin = json::parse(r.chunks[3]).as_object();
  EXPECT_TRUE(fin.at("done").as_bool());
  EXPECT_EQ(fin.at("done_reason").as_string(), "length");
  EXPECT_EQ(fin.at("eval_count").as_int64(), 3);
  EXPECT_EQ(fin.at("prompt_eval_count").as_int64(), 1);
  // 5ms TTFT: prompt_eval_duration (ns) covers at least it; total covers everything.
  EXPECT_GE(fin.at("prompt_eval_duration").as_int64(), 5'000'000);
  EXPECT_GE(fin.at("total_duration").as_int64(), fin.at("prompt_eval_duration").as_int64());

  r = call(port_, "POST", "/api/chat", R"({"model":"llama3","messages":[{"role":"user","content":"hi"}],"stream":false})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto o = json::parse(r.body).as_object();
  EXPECT_TRUE(o.at("done").as_bool());
  EXPECT_EQ(o.at("done_reason").as_string(), "stop");
  EXPECT_EQ(o.at("message").as_object().at("content").as_string(), sim_text(6));
  EXPECT_EQ(o.at("eval_count").as_int64(), 6);
  EXPECT_TRUE(wait_until([&] { return server_->stats().completed == 2u; }));
}

TEST_F(SimServerTest, AnthropicStreamAndNonStream) {
  start();
  auto r = call(port_, "POST", "/v1/messages",
                R"({"model":"claude-sim","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  ASSERT_EQ(r.chunks.size(), 3u);
  std::vector<std::string> events;
  std::string text;
  for (auto& f : sse_frames(r.body)) {
    events.push_back(f.event);
    auto d = json::parse(f.data).as_object();
    if (f.event == "content_block_delta") text += d.at("delta").as_object().at("text").as_string();
    if (f.event == "message_delta") {
      EXPECT_EQ(d.at("delta").as_object().at("stop_reason").as_string(), "max_tokens");
    }
  }
  EXPECT_EQ(events, (std::vector<std::string>{"message_start", "content_block_start", "ping",
                                              "content_block_delta", "content_block_delta",
                                              "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(text, sim_text(2));

  r = call(port_, "POST", "/v1/messages", R"({"model":"claude-sim","messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto b = json::parse(r.body).as_object();
  EXPECT_EQ(b.at("type").as_string(), "message");
  EXPECT_EQ(b.at("stop_reason").as_string(), "end_turn");
  EXPECT_EQ(b.at("content").as_array()[0].as_object().at("text").as_string(), sim_text(6));
  EXPECT_EQ(b.at("usage").as_object().at("output_tokens").as_int64(), 6);
}

const char* kToolsBody = R"({"model":"gpt-sim","stream":true,"messages":[{"role":"user","content":"use get_weather for Paris"}],
  "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]})";

TEST_F(SimServerTest, OpenAiToolCallStreamedOneChunkPerToken) {
  start();
  auto r = call(port_, "POST", "/v1/chat/completions", kToolsBody);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_GE(r.chunks.size(), 4u);
  std::string args, id;
  for (std::size_t i = 0; i + 1 < r.chunks.size(); ++i) {
    auto fs = sse_frames(r.chunks[i]);
    ASSERT_EQ(fs.size(), 1u) << "one token per chunk";
    auto d = json::parse(fs[0].data).as_object().at("choices").as_array()[0].as_object().at("delta").as_object();
    auto tc = d.at("tool_calls").as_array()[0].as_object();
    if (i == 0) id = std::string(tc.at("id").as_string());
    args += tc.at("function").as_object().at("arguments").as_string();
  }
  EXPECT_TRUE(id.starts_with("call_")) << id;
  EXPECT_TRUE(json::parse(args).as_object().at("city").is_string()) << args;
  auto tail = sse_frames(r.chunks.back());
  EXPECT_EQ(json::parse(tail[0].data).as_object().at("choices").as_array()[0].as_object().at("finish_reason"), "tool_calls");

  // The tool's result last: text again.
  auto t = call(port_, "POST", "/v1/chat/completions",
                R"({"model":"m","max_tokens":4,"tools":[{"type":"function","function":{"name":"get_weather"}}],"messages":[
                  {"role":"user","content":"use get_weather"},
                  {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
                  {"role":"tool","tool_call_id":"c1","content":"sunny"}]})");
  auto ch = json::parse(t.body).as_object().at("choices").as_array()[0].as_object();
  EXPECT_EQ(ch.at("message").as_object().at("content").as_string(), sim_text(4));
  EXPECT_EQ(ch.at("finish_reason"), "length");
}

TEST_F(SimServerTest, OllamaToolCallIsOneLineAfterItsTokens) {
  auto s = fast();
  s.inter_token = 10ms;
  start(s);
  const auto t0 = Clock::now();
  auto r = call(port_, "POST", "/api/chat",
                R"({"model":"m","messages":[{"role":"user","content":"get_weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.chunks.size(), 2u);  // the call, then the final object
  auto line = json::parse(r.chunks[0]).as_object();
  auto fn = line.at("message").as_object().at("tool_calls").as_array()[0].as_object().at("function").as_object();
  EXPECT_TRUE(fn.at("arguments").as_object().at("city").is_string());
  auto fin = json::parse(r.chunks[1]).as_object();
  const auto n = fin.at("eval_count").as_int64();
  EXPECT_GE(n, 5);
  // Its tokens took their time: (n - 1) inter-token gaps.
  EXPECT_GE(Clock::now() - t0, (n - 1) * 10ms);
}

TEST_F(SimServerTest, StopJsonAndLogprobsOverHttp) {
  start();
  // Anthropic stop_sequences, streamed.
  auto r = call(port_, "POST", "/v1/messages",
                R"({"model":"c","max_tokens":50,"stream":true,"stop_sequences":[" wet"],"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  std::string text;
  for (auto& f : sse_frames(r.body)) {
    auto d = json::parse(f.data).as_object();
    if (f.event == "content_block_delta") text += d.at("delta").as_object().at("text").as_string();
    if (f.event == "message_delta") {
      EXPECT_EQ(d.at("delta").as_object().at("stop_reason"), "stop_sequence");
      EXPECT_EQ(d.at("delta").as_object().at("stop_sequence"), " wet");
      EXPECT_EQ(d.at("usage").as_object().at("output_tokens"), 4);
    }
  }
  EXPECT_EQ(text, "Science home call, or");

  // A JSON schema, with a seed.
  r = call(port_, "POST", "/v1/chat/completions",
           R"({"model":"m","seed":11,"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"n":{"type":"integer"},"s":{"type":"string"}},"required":["n","s"]}}}})");
  auto content = json::parse(r.body).as_object().at("choices").as_array()[0].as_object().at("message").as_object().at("content");
  auto obj = json::parse(content.as_string()).as_object();
  EXPECT_TRUE(obj.at("n").is_int64());
  EXPECT_TRUE(obj.at("s").is_string());

  // Log probabilities in each streamed chunk.
  r = call(port_, "POST", "/v1/chat/completions",
           R"({"model":"m","stream":true,"max_tokens":3,"logprobs":true,"top_logprobs":4,"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_EQ(r.chunks.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    auto c = json::parse(sse_frames(r.chunks[i])[0].data).as_object().at("choices").as_array()[0].as_object();
    auto e = c.at("logprobs").as_object().at("content").as_array()[0].as_object();
    EXPECT_EQ(e.at("token"), c.at("delta").as_object().at("content"));
    EXPECT_EQ(e.at("logprob").to_number<double>(), token_logprob(0, i));
    EXPECT_EQ(e.at("top_logprobs").as_array().size(), 4u);
  }
}

TEST_F(SimServerTest, FaultHeaderErrorsInEachShape) {
  start();
  auto r = call(port_, "POST", "/v1/chat/completions", kOpenAi, {"x-sim-fault: error-429"});
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.headers["retry-after"], "1");
  EXPECT_EQ(json::parse(r.body).as_object().at("error").as_object().at("code").as_string(), "rate_limit_exceeded");

  r = call(port_, "POST", "/api/chat", R"({"model":"m","messages":[]})", {"x-sim-fault: error-500"});
  EXPECT_EQ(r.status, 500);
  EXPECT_TRUE(json::parse(r.body).as_object().at("error").is_string());

  r = call(port_, "POST", "/v1/messages", R"({"model":"m","messages":[]})", {"X-Sim-Fault: error-503"});
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body).as_object().at("type").as_string(), "error");

  r = call(port_, "POST", "/v1/chat/completions", kOpenAi, {"x-sim-fault: bogus"});
  EXPECT_EQ(r.status, 400);
  r = call(port_, "POST", "/v1/chat/completions", "{not json");
  EXPECT_EQ(r.status, 400);

  auto st = server_->stats();
  EXPECT_EQ(st.requests, 5u);
  EXPECT_EQ(st.errors_429, 1u);
  EXPECT_EQ(st.errors_500, 1u);
  EXPECT_EQ(st.errors_503, 1u);
  EXPECT_EQ(st.completed, 0u);
}

TEST_F(SimServerTest, RandomFaultsFollowRates) {
  auto s = fast();
  s.error_rate_500 = 1.0;
  start(s);
  EXPECT_EQ(call(port_, "POST", "/v1/chat/completions", kOpenAi).status, 500);
  // "none" overrides the random faults for one request.
  EXPECT_EQ(call(port_, "POST", "/v1/chat/completions", kOpenAi, {"x-sim-fault: none"}).status, 200);
  EXPECT_EQ(server_->stats().errors_500, 1u);
}

TEST_F(SimServerTest, AbortAfterNDropsTheStream) {
  start();
  const auto chunks = dropped_stream(port_, "/v1/chat/completions", openai_body(10, true), "abort-after=2");
  EXPECT_EQ(chunks.size(), 2u);
  for (auto& ch : chunks) EXPECT_EQ(ch.find("[DONE]"), std::string::npos);
  ASSERT_TRUE(wait_until([&] { return server_->stats().aborted == 1; }));
  EXPECT_EQ(server_->stats().completed, 0u);
  EXPECT_TRUE(wait_until([&] { return server_->stats().in_flight == 0; }));
}

TEST_F(SimServerTest, RandomAbortSendsAboutHalf) {
  auto s = fast();
  s.abort_rate = 1.0;
  start(s);
  Conn c(port_);
  c.send_request("POST", "/api/chat", R"({"model":"m","messages":[],"options":{"num_predict":10}})");
  ASSERT_EQ(c.read_head().status, 200);
  bool eof = false;
  int n = 0;
  while (c.read_chunk(eof)) ++n;
  EXPECT_TRUE(eof);
  EXPECT_EQ(n, 5);
}

TEST_F(SimServerTest, NonStreamAbortGivesNoBody) {
  start();
  Conn c(port_);
  c.send_request("POST", "/v1/chat/completions", openai_body(4, false), {"x-sim-fault: abort-after=2"});
  bool complete = false;
  try {
    auto h = c.read_head();
    (void)c.read_body(h);
    complete = true;
  } catch (const std::exception&) {
  }
  EXPECT_FALSE(complete);
  ASSERT_TRUE(wait_until([&] { return server_->stats().aborted == 1; }));
}

TEST_F(SimServerTest, HangEndsWhenTheClientLeaves) {
  start();
  {
    Conn c(port_);
    c.send_request("POST", "/v1/chat/completions", kOpenAi, {"x-sim-fault: hang"});
    ASSERT_TRUE(wait_until([&] { return server_->stats().hung == 1; }));
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(server_->stats().cancelled, 0u);
  }  // closes
  ASSERT_TRUE(wait_until([&] { return server_->stats().cancelled == 1; }));
  EXPECT_EQ(server_->stats().completed, 0u);
}

TEST_F(SimServerTest, ClosingMidStreamCountsCancelled) {
  auto s = fast();
  s.inter_token = 20ms;
  start(s);
  {
    Conn c(port_);
    c.send_request("POST", "/v1/chat/completions", openai_body(1000, true));
    ASSERT_EQ(c.read_head().status, 200);
    bool eof = false;
    ASSERT_TRUE(c.read_chunk(eof).has_value());
    EXPECT_EQ(server_->stats().in_flight, 1);
  }
  ASSERT_TRUE(wait_until([&] { return server_->stats().cancelled == 1; }));
  EXPECT_TRUE(wait_until([&] { return server_->stats().in_flight == 0; }));
  EXPECT_EQ(server_->stats().completed, 0u);
}

TEST_F(SimServerTest, ClosingBeforeFirstTokenCountsCancelled) {
  auto s = fast();
  s.ttft = 60000ms;
  start(s);
  {
    Conn c(port_);
    c.send_request("POST", "/api/chat", R"({"model":"m","messages":[]})");
    ASSERT_TRUE(wait_until([&] { return server_->stats().in_flight == 1; }));
  }
  ASSERT_TRUE(wait_until([&] { return server_->stats().cancelled == 1; }));
  EXPECT_TRUE(wait_until([&] { return server_->stats().in_flight == 0; }));
}

TEST_F(SimServerTest, QueueingCancelAndQueueFull) {
  auto s = fast();
  s.max_in_flight = 1;
  s.max_waiting = 1;
  s.ttft = 60000ms;  // the first request holds the only slot
  start(s);
  Conn a(port_);
  a.send_request("POST", "/v1/chat/completions", kOpenAi);
  ASSERT_TRUE(wait_until([&] { return server_->stats().in_flight == 1; }));
  {
    Conn b(port_);
    b.send_request("POST", "/v1/chat/completions", kOpenAi);
    ASSERT_TRUE(wait_until([&] { return server_->stats().waiting == 1; }));
    // The queue is full now: a third request is rejected at once.
    auto r = call(port_, "POST", "/v1/messages", R"({"model":"m","messages":[]})");
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(json::parse(r.body).as_object().at("error").as_object().at("type").as_string(), "overloaded_error");
    EXPECT_EQ(server_->stats().rejected_queue_full, 1u);
  }  // b leaves while queued
  ASSERT_TRUE(wait_until([&] { return server_->stats().cancelled == 1; }));
  EXPECT_EQ(server_->stats().waiting, 0);
  EXPECT_EQ(server_->stats().in_flight, 1);
  a.close();
  ASSERT_TRUE(wait_until([&] { return server_->stats().cancelled == 2; }));
  EXPECT_TRUE(wait_until([&] { return server_->stats().in_flight == 0; }));
}

TEST_F(SimServerTest, SecondRequestWaitsForTheSlot) {
  auto s = fast();
  s.max_in_flight = 1;
  s.ttft = 0ms;
  s.inter_token = 20ms;
  start(s);
  // A: 30 tokens. B arrives while A decodes and can start only after A released.
  Conn a(port_);
  a.send_request("POST", "/v1/chat/completions", openai_body(30, true));
  ASSERT_EQ(a.read_head().status, 200);
  bool eof = false;
  ASSERT_TRUE(a.read_chunk(eof).has_value());  // A holds the slot
  const auto b_start = Clock::now();
  Conn b(port_);
  b.send_request("POST", "/v1/chat/completions", openai_body(1, false));
  ASSERT_TRUE(wait_until([&] { return server_->stats().waiting == 1; }));
  std::this_thread::sleep_for(40ms);
  EXPECT_EQ(server_->stats().waiting, 1);  // still queued behind A
  EXPECT_EQ(server_->stats().completed, 0u);
  int a_rest = 0;
  while (a.read_chunk(eof)) ++a_rest;
  EXPECT_FALSE(eof);
  EXPECT_EQ(a_rest, 30);  // 29 tokens + the tail
  auto bh = b.read_head();
  ASSERT_EQ(bh.status, 200);
  (void)b.read_body(bh);
  // B waited for A's remaining 29 inter-token gaps (20ms each, no jitter).
  EXPECT_GE(Clock::now() - b_start, 400ms);
  EXPECT_TRUE(wait_until([&] { return server_->stats().completed == 2u; }));
}

TEST_F(SimServerTest, StreamTimingLowerBound) {
  auto s = fast();
  s.ttft = 50ms;
  s.inter_token = 20ms;
  start(s);
  const auto t0 = Clock::now();
  auto r = call(port_, "POST", "/v1/chat/completions", openai_body(10, true));
  const auto took = Clock::now() - t0;
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.chunks.size(), 11u);
  EXPECT_GE(took, 50ms + 9 * 20ms);  // timers never fire early; jitter is 0
}

TEST_F(SimServerTest, SlowFirstTokenHeaderAddsDelay) {
  start();
  const auto t0 = Clock::now();
  auto r = call(port_, "POST", "/v1/chat/completions", openai_body(1, false), {"x-sim-fault: slow-first-token=300"});
  EXPECT_EQ(r.status, 200);
  EXPECT_GE(Clock::now() - t0, 300ms);
}

TEST_F(SimServerTest, StatsConfigAndResetEndpoints) {
  start();
  ASSERT_EQ(call(port_, "POST", "/v1/chat/completions", kOpenAi).status, 200);
  ASSERT_TRUE(wait_until([&] { return server_->stats().completed == 1u; }));
  auto st = json::parse(call(port_, "GET", "/sim/stats").body).as_object();
  EXPECT_EQ(st.at("requests").to_number<int>(), 1);
  EXPECT_EQ(st.at("completed").to_number<int>(), 1);
  EXPECT_EQ(st.at("in_flight").to_number<int>(), 0);

  auto cfg = call(port_, "POST", "/sim/config", R"({"default_output_tokens":2,"error_rate_503":0.5})");
  ASSERT_EQ(cfg.status, 200) << cfg.body;
  auto g = json::parse(call(port_, "GET", "/sim/config").body).as_object();
  EXPECT_EQ(g.at("default_output_tokens").as_int64(), 2);
  EXPECT_DOUBLE_EQ(g.at("error_rate_503").as_double(), 0.5);
  EXPECT_EQ(call(port_, "POST", "/sim/config", R"({"max_in_flight":0})").status, 400);
  EXPECT_EQ(call(port_, "POST", "/sim/config", R"({"error_rate_503":0})").status, 200);

  // New requests see the new default length.
  auto r = call(port_, "POST", "/v1/chat/completions", kOpenAi);
  EXPECT_EQ(json::parse(r.body).as_object().at("usage").as_object().at("completion_tokens").as_int64(), 2);
  // `completed` rises once the last byte was written, which may be just after we read it.
  ASSERT_TRUE(wait_until([&] { return server_->stats().completed == 2u; }));

  auto reset = call(port_, "POST", "/sim/reset");
  EXPECT_EQ(reset.status, 200);
  st = json::parse(call(port_, "GET", "/sim/stats").body).as_object();
  EXPECT_EQ(st.at("requests").to_number<int>(), 0);
  EXPECT_EQ(st.at("completed").to_number<int>(), 0);
}

TEST_F(SimServerTest, ManyConcurrentClientsAcrossWorkers) {
  auto s = fast();
  s.max_in_flight = 4;
  start(s, 2);
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 16; ++i) {
    ts.emplace_back([&, i] {
      try {
        auto r = call(port_, "POST", i % 2 ? "/v1/chat/completions" : "/api/chat",
                      i % 2 ? openai_body(5, true) : R"({"model":"m","messages":[]})");
        if (r.status == 200) ++ok;
      } catch (...) {
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 16);
  EXPECT_TRUE(wait_until([&] { return server_->stats().completed == 16u; }));
  auto st = server_->stats();
  EXPECT_EQ(st.requests, 16u);
  EXPECT_EQ(st.completed, 16u);
  EXPECT_EQ(st.in_flight, 0);
}

TEST_F(SimServerTest, ShutdownEndsQueuedAndHungRequests) {
  auto s = fast();
  s.max_in_flight = 1;
  s.ttft = 60000ms;
  start(s, 2);
  std::vector<std::unique_ptr<Conn>> conns;
  for (int i = 0; i < 3; ++i) {
    conns.push_back(std::make_unique<Conn>(port_));
    conns.back()->send_request("POST", "/v1/chat/completions", kOpenAi);
  }
  conns.push_back(std::make_unique<Conn>(port_));
  conns.back()->send_request("POST", "/api/chat", R"({"model":"m","messages":[]})", {"x-sim-fault: hang"});
  ASSERT_TRUE(wait_until([&] {
    auto st = server_->stats();
    return st.in_flight == 1 && st.waiting == 2 && st.hung == 1;
  }));
  const auto t0 = Clock::now();
  server_->shutdown(50ms);
  server_->join();
  EXPECT_LT(Clock::now() - t0, 10s);  // the grace period ends waiting work
  server_.reset();  // destroys the suspended requests: slots and queue entries go away
  for (auto& c : conns) EXPECT_TRUE(c->at_eof());
}

// --- Embeddings ---------------------------------------------------------------------------

namespace {

using sluice::sim::testing::cosine;
using sluice::sim::testing::decode_float32_base64;
using sluice::sim::testing::norm;

const char* kEmbedInputs =
    R"(["the cat sat on the mat","the cat sat on a mat","stock markets fell sharply after the announcement"])";

std::vector<float> floats(const json::value& v) {
  std::vector<float> out;
  for (const auto& x : v.as_array()) out.push_back(static_cast<float>(x.to_number<double>()));
  return out;
}

// The vectors of an OpenAI answer, in index order (decoded when base64).
std::vector<std::vector<float>> openai_vectors(const json::object& o) {
  std::vector<std::vector<float>> out;
  for (const auto& d : o.at("data").as_array()) {
    const auto& e = d.as_object();
    EXPECT_EQ(e.at("object").as_string(), "embedding");
    EXPECT_EQ(e.at("index").as_int64(), static_cast<std::int64_t>(out.size()));
    const auto& emb = e.at("embedding");
    out.push_back(emb.is_string() ? decode_float32_base64(emb.as_string()) : floats(emb));
  }
  return out;
}

}  // namespace

TEST_F(SimServerTest, OpenAiEmbeddingsFloat) {
  start();
  auto r = call(port_, "POST", "/v1/embeddings",
                std::string(R"({"model":"emb-sim","input":)") + kEmbedInputs + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.headers["content-type"].starts_with("application/json"));
  auto o = json::parse(r.body).as_object();
  EXPECT_EQ(o.at("object").as_string(), "list");
  EXPECT_EQ(o.at("model").as_string(), "emb-sim");
  auto u = o.at("usage").as_object();
  EXPECT_EQ(u.at("prompt_tokens").as_int64(), 5 + 5 + 12);  // bytes / 4 per text: 22, 20, 49
  EXPECT_EQ(u.at("total_tokens").as_int64(), 22);
  auto v = openai_vectors(o);
  ASSERT_EQ(v.size(), 3u);
  for (const auto& x : v) {
    ASSERT_EQ(x.size(), 256u);
    EXPECT_NEAR(norm(x), 1.0, 1e-5);
  }
  const double near = cosine(v[0], v[1]), far = cosine(v[0], v[2]);
  std::printf("[ cosine  ] over HTTP: similar %.4f, unrelated %.4f\n", near, far);
  EXPECT_GT(near, 0.8);
  EXPECT_LT(far, 0.3);
  EXPECT_EQ(v[0], embed_text("the cat sat on the mat", 256));

  // Identical text, identical vector: in one request and across requests.
  auto again = call(port_, "POST", "/v1/embeddings",
                    R"({"model":"other","input":["the cat sat on a mat","the cat sat on a mat"]})");
  ASSERT_EQ(again.status, 200) << again.body;
  auto v2 = openai_vectors(json::parse(again.body).as_object());
  ASSERT_EQ(v2.size(), 2u);
  EXPECT_EQ(v2[0], v[1]);
  EXPECT_EQ(v2[1], v[1]);

  ASSERT_TRUE(wait_until([&] { return server_->stats().completed == 2u; }));
  auto st = server_->stats();
  EXPECT_EQ(st.embeddings, 2u);
  EXPECT_EQ(st.requests, 0u);  // generation requests only
}

TEST_F(SimServerTest, OpenAiEmbeddingsBase64MatchesFloat) {
  start();
  const std::string body = std::string(R"({"model":"emb-sim","input":)") + kEmbedInputs;
  auto f = call(port_, "POST", "/v1/embeddings", body + "}");
  auto b = call(port_, "POST", "/v1/embeddings", body + R"(,"encoding_format":"base64"})");
  ASSERT_EQ(f.status, 200) << f.body;
  ASSERT_EQ(b.status, 200) << b.body;
  auto bo = json::parse(b.body).as_object();
  for (const auto& d : bo.at("data").as_array())
    ASSERT_TRUE(d.as_object().at("embedding").is_string()) << b.body.substr(0, 200);
  auto vf = openai_vectors(json::parse(f.body).as_object());
  auto vb = openai_vectors(bo);
  ASSERT_EQ(vb.size(), 3u);
  EXPECT_EQ(vb, vf);  // bit for bit: the float answer narrows back to the same float32s
  EXPECT_EQ(bo.at("usage").as_object().at("prompt_tokens").as_int64(), 22);
}

TEST_F(SimServerTest, OpenAiEmbeddingsDimensionsAndTokenIds) {
  start();
  auto r = call(port_, "POST", "/v1/embeddings", R"({"model":"e","input":"the cat sat on the mat","dimensions":64})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto v = openai_vectors(json::parse(r.body).as_object());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].size(), 64u);
  EXPECT_NEAR(norm(v[0]), 1.0, 1e-5);

  r = call(port_, "POST", "/v1/embeddings", R"({"model":"e","input":[[1,2,3,4,5],[1,2,3,4,6]],"dimensions":4096})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto o = json::parse(r.body).as_object();
  EXPECT_EQ(o.at("usage").as_object().at("prompt_tokens").as_int64(), 10);  // token arrays: their length
  v = openai_vectors(o);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].size(), 4096u);
  EXPECT_GT(cosine(v[0], v[1]), 0.6);

  r = call(port_, "POST", "/v1/embeddings", R"({"model":"e","input":[7,8,9]})");
  ASSERT_EQ(r.status, 200) << r.body;
  o = json::parse(r.body).as_object();
  EXPECT_EQ(o.at("usage").as_object().at("prompt_tokens").as_int64(), 3);
  EXPECT_EQ(openai_vectors(o).size(), 1u);
}

TEST_F(SimServerTest, OpenAiEmbeddingsBadRequests) {
  start();
  for (const char* body : {R"({"model":"e"})", R"({"model":"e","input":""})", R"({"model":"e","input":[]})",
                           R"({"model":"e","input":[1,"a"]})", R"({"model":"e","input":"a","dimensions":5000})",
                           R"({"model":"e","input":"a","encoding_format":"hex"})", R"({"input":"a"})", "{not json"}) {
    auto r = call(port_, "POST", "/v1/embeddings", body);
    EXPECT_EQ(r.status, 400) << body;
    auto e = json::parse(r.body).as_object().at("error").as_object();
    EXPECT_EQ(e.at("type").as_string(), "invalid_request_error") << body;
    EXPECT_EQ(e.at("code").as_string(), "invalid_request") << body;
    EXPECT_FALSE(e.at("message").as_string().empty()) << body;
  }
  EXPECT_EQ(call(port_, "GET", "/v1/embeddings").status, 405);
  EXPECT_EQ(server_->stats().embeddings, 8u);
  EXPECT_EQ(server_->stats().completed, 0u);
}

TEST_F(SimServerTest, OllamaEmbed) {
  start();
  auto r = call(port_, "POST", "/api/embed",
                R"({"model":"nomic-sim","input":"the cat sat on the mat","truncate":true,"options":{},"keep_alive":"5m"})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto o = json::parse(r.body).as_object();
  EXPECT_EQ(o.at("model").as_string(), "nomic-sim");
  auto& embs = o.at("embeddings").as_array();
  ASSERT_EQ(embs.size(), 1u);
  const auto v = floats(embs[0]);
  EXPECT_EQ(v, embed_text("the cat sat on the mat", 256));  // the same vector as /v1/embeddings
  EXPECT_EQ(o.at("prompt_eval_count").as_int64(), 5);
  const std::int64_t total = o.at("total_duration").as_int64(), load = o.at("load_duration").as_int64();
  EXPECT_GE(total, 5'000'000);  // at least ttft (5ms)
  EXPECT_GE(load, 0);
  EXPECT_LE(load, total);

  r = call(port_, "POST", "/api/embed", R"({"model":"m","input":["the cat sat on a mat","the cat sat on the mat"],"dimensions":32})");
  ASSERT_EQ(r.status, 200) << r.body;
  o = json::parse(r.body).as_object();
  ASSERT_EQ(o.at("embeddings").as_array().size(), 2u);
  const auto a = floats(o.at("embeddings").as_array()[0]), b = floats(o.at("embeddings").as_array()[1]);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_GT(cosine(a, b), 0.8);

  // As Ollama: no input is no embeddings (a model load), not an error.
  r = call(port_, "POST", "/api/embed", R"({"model":"m","input":""})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(json::parse(r.body).as_object().at("embeddings").as_array().empty());
}

TEST_F(SimServerTest, OllamaEmbedBadRequests) {
  start();
  auto r = call(port_, "POST", "/api/embed", R"({"model":"m","input":5})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body).as_object().at("error").as_string(), "invalid input type");
  r = call(port_, "POST", "/api/embed", R"({"input":"a"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body).as_object().at("error").as_string(), "model is required");
  r = call(port_, "POST", "/api/embed", R"({"model":"m","input":"a","dimensions":100000})");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(json::parse(r.body).as_object().at("error").is_string());
  r = call(port_, "GET", "/api/embed");
  EXPECT_EQ(r.status, 405);
  EXPECT_TRUE(json::parse(r.body).as_object().at("error").is_string());
}

TEST_F(SimServerTest, EmbeddingsFaultsAndLatency) {
  auto s = fast();
  s.ttft = 80ms;
  start(s);
  const std::string body = R"({"model":"e","input":"hello"})";
  auto r = call(port_, "POST", "/v1/embeddings", body, {"x-sim-fault: error-429"});
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.headers["retry-after"], "1");
  EXPECT_EQ(json::parse(r.body).as_object().at("error").as_object().at("code").as_string(), "rate_limit_exceeded");
  r = call(port_, "POST", "/api/embed", body, {"x-sim-fault: error-500"});
  EXPECT_EQ(r.status, 500);
  EXPECT_TRUE(json::parse(r.body).as_object().at("error").is_string());
  EXPECT_EQ(call(port_, "POST", "/v1/embeddings", body, {"x-sim-fault: bogus"}).status, 400);

  // The answer comes after ttft (+ slow first token), like a prompt's prefill.
  auto t0 = Clock::now();
  EXPECT_EQ(call(port_, "POST", "/v1/embeddings", body).status, 200);
  EXPECT_GE(Clock::now() - t0, 80ms);
  t0 = Clock::now();
  EXPECT_EQ(call(port_, "POST", "/api/embed", body, {"x-sim-fault: slow-first-token=100"}).status, 200);
  EXPECT_GE(Clock::now() - t0, 180ms);

  // Abort: the connection is dropped when the answer is due.
  {
    Conn c(port_);
    c.send_request("POST", "/v1/embeddings", body, {"x-sim-fault: abort-after=0"});
    bool complete = false;
    try {
      auto h = c.read_head();
      (void)c.read_body(h);
      complete = true;
    } catch (const std::exception&) {
    }
    EXPECT_FALSE(complete);
  }
  // Hang: until the client leaves.
  {
    Conn c(port_);
    c.send_request("POST", "/api/embed", body, {"x-sim-fault: hang"});
    ASSERT_TRUE(wait_until([&] { return server_->stats().hung == 1; }));
  }
  ASSERT_TRUE(wait_until([&] {
    auto st = server_->stats();
    return st.completed == 2u && st.aborted == 1u && st.cancelled == 1u;
  }));
  auto st = server_->stats();
  EXPECT_EQ(st.embeddings, 7u);
  EXPECT_EQ(st.errors_429, 1u);
  EXPECT_EQ(st.errors_500, 1u);
  EXPECT_EQ(st.requests, 0u);
  EXPECT_EQ(json::parse(call(port_, "GET", "/sim/stats").body).as_object().at("embeddings").to_number<int>(), 7);

  // Random faults apply too.
  ASSERT_EQ(call(port_, "POST", "/sim/config", R"({"error_rate_503":1})").status, 200);
  EXPECT_EQ(call(port_, "POST", "/v1/embeddings", body).status, 503);
}

TEST_F(SimServerTest, ResponsesStreamedAndNotCountedAsResponses) {
  start();
  const std::string body = R"({"model":"gpt-sim","input":"hello there, simulator","max_output_tokens":3)";
  auto r = call(port_, "POST", "/v1/responses", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.headers["content-type"].starts_with("application/json"));
  auto o = json::parse(r.body).as_object();
  EXPECT_TRUE(o.at("id").as_string().starts_with("resp_"));
  EXPECT_EQ(o.at("status").as_string(), "incomplete");
  EXPECT_EQ(o.at("output").as_array()[0].as_object().at("content").as_array()[0].as_object().at("text").as_string(),
            sim_text(3));
  EXPECT_EQ(o.at("usage").as_object().at("input_tokens").as_int64(), 5);

  // One HTTP chunk per token (the first with everything before it), then the end.
  r = call(port_, "POST", "/v1/responses", body + R"(,"stream":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  ASSERT_EQ(r.chunks.size(), 4u);
  EXPECT_EQ(sse_frames(r.chunks[0]).size(), 5u);
  EXPECT_EQ(sse_frames(r.chunks[1]).size(), 1u);
  auto tail = sse_frames(r.chunks[3]);
  EXPECT_EQ(tail.back().event, "response.incomplete");
  EXPECT_EQ(json::parse(tail.back().data).as_object().at("sequence_number").as_int64(), 10);
  EXPECT_EQ(r.body.find("[DONE]"), std::string::npos);

  EXPECT_EQ(call(port_, "GET", "/v1/responses").status, 405);
  ASSERT_TRUE(wait_until([&] { return server_->stats().completed == 2u; }));
  auto st = server_->stats();
  EXPECT_EQ(st.responses, 2u);
  EXPECT_EQ(st.requests, 2u);
  call(port_, "POST", "/v1/chat/completions", kOpenAi);
  EXPECT_EQ(server_->stats().responses, 2u);  // a chat completion is not one
  EXPECT_EQ(json::parse(call(port_, "GET", "/sim/stats").body).as_object().at("responses").to_number<int>(), 2);
}

TEST_F(SimServerTest, ResponsesFaultsAndBadRequests) {
  start();
  const std::string body = R"({"model":"m","input":"hi","stream":true,"max_output_tokens":10})";
  auto r = call(port_, "POST", "/v1/responses", body, {"x-sim-fault: error-503"});
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body).as_object().at("error").as_object().at("code").as_string(), "service_unavailable");
  r = call(port_, "POST", "/v1/responses", R"({"model":"m","input":"hi","previous_response_id":"resp_1"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body).as_object().at("error").as_object().at("message").as_string(),
            "previous_response_id is not supported by this server (it stores nothing)");
  const auto chunks = dropped_stream(port_, "/v1/responses", body, "abort-after=2");
  EXPECT_EQ(chunks.size(), 2u);
  for (auto& ch : chunks) EXPECT_EQ(ch.find("response.completed"), std::string::npos);
  ASSERT_TRUE(wait_until([&] { return server_->stats().aborted == 1u; }));
  auto st = server_->stats();
  EXPECT_EQ(st.responses, 3u);
  EXPECT_EQ(st.errors_503, 1u);
  EXPECT_EQ(st.completed, 0u);
}

TEST_F(SimServerTest, ResponsesReasoningTakesTimeBeforeTheFirstToken) {
  auto s = fast();
  s.ttft = 1ms;
  s.inter_token = 20ms;
  start(s);
  Reply r;
  auto took = [&](std::string_view body) {
    const auto t0 = Clock::now();
    r = call(port_, "POST", "/v1/responses", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return Clock::now() - t0;
  };
  const auto one_token = took(R"({"model":"m","input":"hi","max_output_tokens":1})");
  const auto reasoned = took(R"({"model":"m","input":"hi","max_output_tokens":9,"reasoning":{}})");
  const json::value b = json::parse(r.body);
  const json::object& u = b.at("usage").as_object();
  const auto summary = u.at("output_tokens_details").as_object().at("reasoning_tokens").as_int64();
  ASSERT_GE(summary, 4);
  EXPECT_LT(one_token, 1ms + summary * 20ms);
  // Each token of the summary, then of the answer, takes its gap (no jitter, timers never early).
  EXPECT_GE(reasoned, 1ms + (u.at("output_tokens").as_int64() - 1) * 20ms);
}
