#include "common/thread_name.hpp"

#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <thread>

namespace {

std::string name_in_new_thread(const char* name) {
  std::string seen;
  std::thread([&] {
    sluice::name_this_thread(name);
    char buf[64] = {};
    if (pthread_getname_np(pthread_self(), buf, sizeof buf) == 0) seen = buf;
  }).join();
  return seen;
}

TEST(ThreadName, TheThreadCarriesTheName) { EXPECT_EQ(name_in_new_thread("sluice-history"), "sluice-history"); }

TEST(ThreadName, ANameOverFifteenCharactersIsCutNotRefused) {
  // pthread_setname_np refuses a name over 15 characters; the thread would keep its old one.
  EXPECT_EQ(name_in_new_thread("sluice-a-very-long-role"), "sluice-a-very-l");
}

}  // namespace
