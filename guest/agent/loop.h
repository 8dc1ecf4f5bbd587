// Loop: the agent's single-threaded epoll event loop with timers.
//
// Why not common/event_loop.h: the agent is a static binary without spdlog,
// and it needs timers and edge-free (level-triggered) interest changes for
// backpressure. Everything in the agent runs on this one thread, so no
// locking is needed anywhere in the agent.
//
// Contracts:
//  - Watch() returns a token; events are routed by token, never by fd, so an
//    event that arrives after Unwatch() (or for a reused fd number) is
//    dropped instead of reaching the wrong handler.
//  - A handler may Unwatch any token (its own included) and destroy objects;
//    callers defer destroying the object that is running the handler to
//    Defer(), which runs after the current batch of events.
//  - Timers fire once; Cancel() on a fired or unknown timer is a no-op.
#pragma once

#include <sys/epoll.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace kubicle::guest::agent {

using SteadyClock = std::chrono::steady_clock;

class Loop {
 public:
  using Handler = std::function<void(uint32_t events)>;
  using Token = uint64_t;

  static Result<Loop> Create();
  Loop(Loop&&) = default;
  Loop& operator=(Loop&&) = default;

  // Watches fd for `events` (EPOLLIN/EPOLLOUT, level-triggered).
  Result<Token> Watch(int fd, uint32_t events, Handler handler);
  // Changes the interest set; no-op for unknown tokens.
  void Modify(Token token, uint32_t events);
  void Unwatch(Token token);

  Token AddTimer(SteadyClock::time_point when, std::function<void()> fn);
  void CancelTimer(Token token);
  // Runs fn after the current batch of events (safe place to destroy things).
  void Defer(std::function<void()> fn);

  // One round: waits for events or the next timer (at most max_wait), then
  // dispatches events, due timers and deferred work.
  void RunOnce(std::chrono::milliseconds max_wait);
  void Run();
  void Stop() { stop_ = true; }

 private:
  Loop() = default;
  struct Watch_ {
    int fd;
    uint32_t events;
    Handler handler;
  };
  UniqueFd epfd_;
  Token next_ = 1;
  std::map<Token, Watch_> watches_;
  std::multimap<SteadyClock::time_point, Token> timer_order_;
  std::map<Token, std::pair<SteadyClock::time_point, std::function<void()>>> timers_;
  std::vector<std::function<void()>> deferred_;
  bool stop_ = false;
};

}  // namespace kubicle::guest::agent
