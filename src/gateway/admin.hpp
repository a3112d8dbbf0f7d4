#pragma once
// The /admin/ endpoints (docs/admin.md), behind the request handler's authentication: the
// handler finds who acts (an admin or viewer key, or the admin listener, which asks none)
// and replies; everything else is here.
//   /admin/keys             keys managed at runtime (control_store.hpp)
//   /admin/backends         backends, drain and undrain
//   /admin/routes           routes, canary weights
//   /admin/requests         the fleet's requests in flight; POST .../<id>/cancel
//   /admin/audit            the audit trail
//   /admin/reload           the configuration file again
//   /admin/cache            the response cache (cache_admin.hpp)
//   /admin/usage/reconcile  the history next to the token ledger (reconcile.hpp)
// Reading needs an admin or viewer key; a change needs an admin key. Every change that
// succeeded is an audit record: a row in the history's `audit` table, an `admin.audit`
// event, naming who made it.
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "gateway/reconcile.hpp"  // ReconcileAnswer

namespace sluice::config {
struct ApiKey;
}
namespace sluice::keys {
class KeySet;
}
namespace sluice::cache {
class WorkerCache;
}

namespace sluice::gateway {

struct Shared;
struct RoutingTable;
using AdminAnswer = ReconcileAnswer;

struct AdminCall {
  std::string_view method;
  std::string_view path;  // starts with "/admin/"
  std::string_view query;
  std::string_view body;
  const config::ApiKey* by = nullptr;  // who acts
  std::string_view request_id;
  std::shared_ptr<const keys::KeySet> keys;    // in force, held while the call runs
  std::shared_ptr<const RoutingTable> table;   // in force
  cache::WorkerCache* cache = nullptr;         // this worker's (null: no cache)
};

// Runs on the calling worker; blocking parts (the database) on the query thread.
boost::asio::awaitable<AdminAnswer> admin_call(Shared& g, const AdminCall& call);

}  // namespace sluice::gateway
