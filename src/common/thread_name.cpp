#include "common/thread_name.hpp"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>

namespace sluice {

void name_this_thread(const char* name) noexcept {
  char cut[16];
  std::strncpy(cut, name, sizeof cut - 1);
  cut[sizeof cut - 1] = '\0';
  pthread_setname_np(pthread_self(), cut);  // fails only for a name over 15 characters
}

void lower_this_thread_priority() noexcept {
  // On Linux the nice value is per thread (setpriority on the thread's id). Raising it needs
  // no privilege; a failure leaves the thread as it was.
  const int now = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), now < 10 ? 10 : now);
}

}  // namespace sluice
