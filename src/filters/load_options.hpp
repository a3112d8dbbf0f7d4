#pragma once
// models[].load_options as a function (filters/load_options.cpp): the filter applies the
// named route's policy; the handler applies a fallback's or canary's own before sending the
// request to its backends.
#include <boost/json/fwd.hpp>

namespace sluice::config {
struct Route;
}

namespace sluice::filters {

struct Stop;

// Applies `route`'s load_options (which it must have) to a chat request body: pins, checks
// or fills num_ctx, num_gpu and num_batch, and drops a client's keep_alive. False, with the
// refusal in `stop`, when a value is not allowed.
bool apply_load_options(const config::Route& route, boost::json::object& body, Stop& stop);

}  // namespace sluice::filters
