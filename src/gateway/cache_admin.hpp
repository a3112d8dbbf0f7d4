#pragma once
// /admin/cache: the response cache for operators (docs/cache.md, "Inspection").
//   GET    /admin/cache?route=<alias>&limit=<n>   the entries (most recent first in memory)
//   DELETE /admin/cache?key=<hash> | route=<alias> | all=true   drops them
#include <boost/asio/awaitable.hpp>
#include <string>
#include <string_view>

#include "gateway/reconcile.hpp"  // ReconcileAnswer: reason, body, param

namespace sluice::cache {
class WorkerCache;
}

namespace sluice::gateway {

using AdminAnswer = ReconcileAnswer;

boost::asio::awaitable<AdminAnswer> cache_admin(cache::WorkerCache& cache, std::string_view method,
                                                std::string_view query_string);

}  // namespace sluice::gateway
