#pragma once
// Redis client (RESP2) on Asio coroutines: one pipelined connection per worker thread (or
// one per cluster node, for a Redis Cluster).
//
//   RedisConnection conn(io.get_executor(), endpoint, options);
//   conn.start();                                   // connects in the background, forever
//   RedisResult r = co_await conn.command("INCR", key);           // or command(std::vector<std::string>)
//   RedisResult e = co_await conn.eval(script, std::move(keys), std::move(args));  // EVALSHA; EVAL on NOSCRIPT
//   if (!r.ok()) ...r.error...                      // transport failure (down, timeout, lost)
//   else if (r.reply->is_error()) ...               // Redis answered with an error
//   conn.stop();                                    // fails what is pending; no more reconnects
//
// - Pipelining: every command() / eval() from any number of coroutines goes into one FIFO;
//   commands queued while a write is in flight (or in the same loop turn) leave in one write.
// - Down: commands fail at once ("not connected: <last error>") instead of waiting.
// - A command unanswered after command_timeout breaks the connection (replies could no
//   longer be matched): every pending command fails, the connection reconnects every
//   reconnect_interval until AUTH/SELECT/PING succeed, then up() is true again.
// - Not thread-safe: construct, start, stop and issue commands on the executor's thread
//   (the worker's io_context). Only the status accessors may be read from any thread.
// - Lifetime: the coroutines and handlers share the internal state, so the object may be
//   destroyed (after stop(), or destroy it directly: the destructor stops) while commands
//   are in flight; they complete with the error "stopped" once the io_context runs them.
//   A command cannot be cancelled by the caller; it ends within command_timeout at most.
// - GCC 12 rejects a braced list inside a co_await expression ("array used as
//   initializer") and destroys other aggregate temporaries there (capturing lambdas)
//   twice: write `co_await conn.command("GET", key)` (the variadic form), not
//   `co_await conn.command({"GET", key})`, and build eval's key/arg vectors beforehand.
// See docs/redis.md.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/redis_url.hpp"

namespace sluice::store {

// The endpoint and its URL syntax live in common/ (config validates URLs at load).
using sluice::RedisEndpoint;
using sluice::parse_redis_url;
using sluice::describe;

struct RedisReply {
  enum class Type { nil, integer, string, status, error, array };
  Type type = Type::nil;
  std::int64_t integer = 0;
  std::string str;                    // string, status and error
  std::vector<RedisReply> elements;   // array
  bool is_error() const { return type == Type::error; }
};

struct RedisResult {                  // transport outcome
  std::optional<RedisReply> reply;    // set when Redis answered (an error reply is still an answer)
  std::string error;                  // set when it did not: "not connected: ...", "timeout after 250ms",
                                      // "connection lost: ...", "pipeline full", "stopped"
  bool ok() const { return reply.has_value(); }
};

struct RedisScript {
  std::string source;
  std::string sha1;                   // lower-case hex, as Redis computes it
  explicit RedisScript(std::string src);
};

struct RedisOptions {
  std::chrono::milliseconds connect_timeout{500};     // TCP connect + AUTH/SELECT/PING
  std::chrono::milliseconds command_timeout{250};     // per command, from the call
  std::chrono::milliseconds reconnect_interval{1000}; // between connection attempts while down
  std::size_t max_pending = 10000;                    // commands waiting for a reply; beyond: "pipeline full"
};

// Appends one command in RESP2 framing (*<n>, then $<len> and the bytes per argument):
// for a client of its own (pub/sub, gateway/control_notify.cpp) too.
void append_resp_command(std::string& out, const std::vector<std::string>& argv);

class RedisConnection {
 public:
  RedisConnection(boost::asio::any_io_executor ex, RedisEndpoint ep, RedisOptions opt = {});
  ~RedisConnection();  // stop()s
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Connects in the background (resolve, TCP, AUTH, SELECT, PING), then keeps
  // reconnecting every reconnect_interval while down, until stop(). Call once.
  void start();
  // Closes the connection, fails pending commands ("stopped"), stops reconnecting.
  void stop();

  // One command; completes (on the caller's executor, which must be this connection's)
  // with the reply or a transport error. Fails at once while down or when the pipeline
  // holds max_pending commands. (`asking`: ASKING goes first, in the same write; the
  // cluster client's, for a slot being migrated.)
  boost::asio::awaitable<RedisResult> command(std::vector<std::string> argv, bool asking = false);
  // command("SET", key, value): the same, from string-like arguments (copied at the call).
  template <class... Args>
    requires(sizeof...(Args) > 0 && (std::is_convertible_v<const Args&, std::string_view> && ...))
  boost::asio::awaitable<RedisResult> command(const Args&... args) {
    std::vector<std::string> argv;
    argv.reserve(sizeof...(Args));
    (argv.emplace_back(std::string_view(args)), ...);
    return command(std::move(argv));
  }
  // EVALSHA sha numkeys keys... args...; on a NOSCRIPT error reply, EVAL with the source
  // (which also loads it for the next EVALSHA). Other error replies are returned as is.
  // `script` is read again after the first reply: it must outlive the call.
  boost::asio::awaitable<RedisResult> eval(const RedisScript& script, std::vector<std::string> keys,
                                           std::vector<std::string> args, bool asking = false);

  // A Redis Cluster (a redis-cluster:// endpoint): each command goes to the node serving
  // its key's slot (see key_slot), following MOVED and ASK; a script's keys must share one
  // slot (hash tags), as must a multi-key command's, but for MGET, DEL, UNLINK and EXISTS,
  // which are split by slot and put back together; SCAN walks every master in turn.
  bool cluster() const { return cluster_ != nullptr; }

  // Status, safe to read from any thread.
  bool up() const;                    // connected and AUTH/SELECT/PING succeeded
  std::string last_error() const;     // why it is (or last was) down; empty when none yet
  std::uint64_t reconnects() const;   // times it came back up after being down
  std::uint64_t commands() const;     // commands issued by callers (an eval fallback counts twice)
  std::uint64_t failures() const;     // of those, completed with a transport error
  std::uint64_t writes() const;       // socket writes issued (commands / writes = batching)

  struct State;    // internal; shared with the coroutines and handlers in flight
  struct Cluster;  // internal (redis_cluster.cpp): the slot map and a connection per node

 private:
  std::shared_ptr<State> state_;      // one server (redis:// or through sentinels)
  std::shared_ptr<Cluster> cluster_;  // or a cluster
};

// The Redis Cluster hash slot of `key` (CRC16 of its hash tag, the part between the first
// '{' and the next '}' when not empty, else of the whole key; mod 16384).
std::uint16_t key_slot(std::string_view key) noexcept;

}  // namespace sluice::store
