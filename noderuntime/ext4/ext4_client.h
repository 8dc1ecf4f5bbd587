// Ext4Client: the node's side of kubicle-ext4 (ext4_wire.h). Each call
// starts one confined helper with the image as its fd 3 and a socket as
// its fd 0, sends the request, reads the reply frames with their limits
// checked before their bytes are read, and kills the helper at the wall
// deadline. What the helper says is hostile: a frame over its limit, bad
// JSON, a missing final frame or a helper that died are DataLoss.
//
// Thread-safe: calls share nothing but the options.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"
#include "guest/client/agent_client.h"
#include "guest/protocol/messages.h"
#include "noderuntime/ext4/ext4_wire.h"

namespace kubicle::noderuntime::ext4 {

struct Ext4ClientOptions {
  std::string helper;                           // path to kubicle-ext4
  std::chrono::milliseconds deadline{60000};    // one call, wall time
  uint64_t mem_mib = 512;                       // the helper's RLIMIT_AS
  uint64_t cpu_seconds = 60;                    // its RLIMIT_CPU
};

class Ext4Client {
 public:
  explicit Ext4Client(Ext4ClientOptions options) : options_(std::move(options)) {}

  Result<guest::protocol::StatReply> Stat(const std::string& image, const std::string& path);
  Status Read(const std::string& image, const std::string& path,
              const guest::client::FileChunkFn& on_chunk);
  Status Write(const std::string& image, const std::string& path, guest::protocol::ByteSpan data,
               uint32_t mode);
  Result<std::vector<guest::protocol::DirEntry>> List(const std::string& image,
                                                      const std::string& path, size_t max_entries);
  Status Remove(const std::string& image, const std::string& path, bool recursive);

 private:
  using JsonFn = std::function<Status(const std::string& json_text, bool* final_frame)>;
  using DataFn = std::function<Status(const uint8_t* p, size_t n)>;
  Status Call(const std::string& image, const Request& req, guest::protocol::ByteSpan data,
              const JsonFn& on_json, const DataFn& on_data);

  Ext4ClientOptions options_;
};

}  // namespace kubicle::noderuntime::ext4
