#pragma once
// Internal to store/: the Redis Cluster side of RedisConnection (redis_cluster.cpp).
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>
#include <vector>

#include "store/redis.hpp"

namespace sluice::store {

using ClusterPtr = std::shared_ptr<RedisConnection::Cluster>;

ClusterPtr make_cluster(boost::asio::any_io_executor ex, RedisEndpoint ep, RedisOptions opt);
void cluster_start(const ClusterPtr& c);
void cluster_stop(RedisConnection::Cluster& c);
boost::asio::awaitable<RedisResult> cluster_command(ClusterPtr c, std::vector<std::string> argv);
boost::asio::awaitable<RedisResult> cluster_eval(ClusterPtr c, const RedisScript& script, std::vector<std::string> keys,
                                                 std::vector<std::string> args);
bool cluster_up(const RedisConnection::Cluster& c);
std::string cluster_last_error(const RedisConnection::Cluster& c);
std::uint64_t cluster_commands(const RedisConnection::Cluster& c);
std::uint64_t cluster_failures(const RedisConnection::Cluster& c);
// The sum over the nodes' connections of one of their counters.
std::uint64_t cluster_stat(const RedisConnection::Cluster& c, std::uint64_t (RedisConnection::*stat)() const);

}  // namespace sluice::store
