#pragma once
// Test hooks for the event sink; not for production code.
#include "events/events.hpp"

namespace sluice::events {

struct TestAccess {
  // Raises a fabricated fatal error in the current producer (rd_kafka_test_fatal_error),
  // as the idempotent producer would on e.g. an out-of-order sequence. False if refused.
  static bool raise_fatal(EventSink& sink);
};

}  // namespace sluice::events
