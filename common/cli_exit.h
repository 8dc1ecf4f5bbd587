// How the command-line tools end: their output flushed, then _Exit, without
// static destructors. cpprestsdk tears down its shared thread pool and its
// pooled TLS connections in static destructors, in no fixed order with
// OpenSSL's own cleanup, and now and then that aborts a process that had
// finished its work (exit 134 for a command that answered; cpprestsdk
// #1482). A CLI holds nothing the kernel does not release at exit.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace kubicle {

[[noreturn]] inline void ExitCli(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace kubicle
