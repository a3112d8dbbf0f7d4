#pragma once
// Where Redis is: the endpoint and its URL syntax. Kept apart from the client (store/) so
// the configuration can reject a bad URL at load time.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

struct RedisHost {
  std::string host;
  std::uint16_t port = 0;
};

struct RedisEndpoint {
  std::string host = "127.0.0.1";
  std::uint16_t port = 6379;
  int db = 0;
  std::string username, password;  // AUTH [username] password when a password is set
  bool tls = false;                // not supported yet: parse_redis_url rejects rediss://
  // Sentinel: the master named `master` is asked of these (in order, the first that
  // answers) before each connection; host and port above are then unused.
  std::vector<RedisHost> sentinels;
  std::string master;
  // Redis Cluster: the nodes asked for the slot map (any of them; the rest of the cluster
  // is learned from it); host and port above are then unused, db is 0.
  std::vector<RedisHost> cluster;
};

// "redis://[[user]:password@]host[:port][/db]"; IPv6 hosts in brackets; user and password
// are percent-decoded. "redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/
// master[/db]": the sentinels (port 26379 by default) and the master's name; the user and
// password are the master's (the sentinels are asked without). "redis-cluster://[[user]:
// password@]host[:port][,host[:port]...]": a Redis Cluster, from these seed nodes (port 6379
// by default; no database number, a cluster has only 0). "rediss://" is rejected
// (TLS is not supported yet). On failure returns nullopt and, if `error` is given, a
// one-line reason.
std::optional<RedisEndpoint> parse_redis_url(std::string_view url, std::string* error = nullptr);
// "redis://user:***@host:port/db" for banners and logs: the password is masked.
std::string describe(const RedisEndpoint& ep);

}  // namespace sluice
