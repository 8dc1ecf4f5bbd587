#include "common/stop_signals.h"

#include <pthread.h>

#include <cerrno>

namespace kubicle {

StopSignals::StopSignals(std::initializer_list<int> signals) {
  sigemptyset(&set_);
  for (int sig : signals) sigaddset(&set_, sig);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int StopSignals::WaitFor(std::chrono::milliseconds timeout) const {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const timespec ts{static_cast<time_t>(s.count()),
                    static_cast<long>(std::chrono::nanoseconds(timeout - s).count())};
  for (;;) {
    const int sig = sigtimedwait(&set_, nullptr, &ts);
    if (sig > 0) return sig;
    if (errno == EAGAIN) return 0;  // EINTR: another signal's handler ran; wait again
  }
}

int StopSignals::Wait() const {
  int sig = 0;
  while (sigwait(&set_, &sig) != 0) {
  }
  return sig;
}

}  // namespace kubicle
