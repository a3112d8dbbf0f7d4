// The stored responses' memory store: per tenant, bounded by bytes and by time.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "conversations/store.hpp"

using namespace sluice::conversations;

namespace {

TEST(ConversationStore, PerTenantBoundedByBytesAndTime) {
  auto store = std::make_unique<MemoryStore>(std::chrono::milliseconds(200), 2000);
  StoredResponse r{std::string(500, 'r'), "[]"};
  store->put("acme", "resp_1", r);
  ASSERT_TRUE(store->get("acme", "resp_1"));
  EXPECT_FALSE(store->get("globex", "resp_1"));  // another tenant never sees it
  EXPECT_FALSE(store->erase("globex", "resp_1"));
  store->put("acme", "resp_2", r);
  store->put("acme", "resp_3", r);
  store->put("acme", "resp_4", r);  // 4 x ~630 bytes > 2000: the oldest went
  EXPECT_FALSE(store->get("acme", "resp_1"));
  EXPECT_TRUE(store->get("acme", "resp_4"));
  EXPECT_LE(store->size(), 3u);
  store->put("acme", "big", StoredResponse{std::string(5000, 'x'), "[]"});  // larger than the bound: not kept
  EXPECT_FALSE(store->get("acme", "big"));
  EXPECT_TRUE(store->erase("acme", "resp_4"));
  EXPECT_FALSE(store->get("acme", "resp_4"));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_FALSE(store->get("acme", "resp_3"));  // past its time
}

}  // namespace
