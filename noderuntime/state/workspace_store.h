// WorkspaceStore: the node's durable workspaces (docs/workspaces.md):
//   <dir>/<name>/record.json   WorkspaceRecord (records.h), crash-safe
//   <dir>/<name>/disk.img      the sparse raw ext4 image (mke2fs; never
//                              mounted on the host)
// It keeps who holds each workspace (one writer: a sandbox or a run, in
// memory only, rebuilt by the manager at Open from sandbox records), and
// serves the host-side file calls through the confined kubicle-ext4
// helper (ext4/ext4_client.h) while nobody holds it.
//
// Contracts:
//  - Thread-safe. Put serialises with other Puts (mke2fs runs outside the
//    map's lock); a file call and an attach or delete of the same
//    workspace exclude each other (per-workspace lock; an attach waits up
//    to attach_wait for a file call in flight, then FailedPrecondition).
//  - Put is idempotent for the same name and size. A workspace exists once
//    its record is written (after its image): a directory without a
//    record is a Put that did not finish, removed at Open.
//  - Budget: the sum of every workspace's size never exceeds budget_mib
//    (0: unbounded), and a new image's whole size must fit the file
//    system's free space when it is made (images are sparse: they fill as
//    guests write).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "noderuntime/ext4/ext4_client.h"
#include "noderuntime/ext4/journal_replay.h"
#include "noderuntime/state/records.h"
#include "noderuntime/sandbox_service.h"

namespace kubicle::noderuntime {

struct WorkspaceStoreOptions {
  std::string dir;                   // <state_dir>/workspaces; created if missing
  uint64_t budget_mib = 0;           // 0: only the file system's free space
  std::string mke2fs = "mke2fs";
  ext4::Ext4ClientOptions helper;
  ext4::JournalReplayOptions replay;  // a journal left by a VM that did not unmount
  std::function<WallTime()> clock;   // default: system_clock::now
  std::chrono::milliseconds attach_wait{10000};
};

class WorkspaceStore {
 public:
  static Result<std::unique_ptr<WorkspaceStore>> Open(WorkspaceStoreOptions options);

  Result<WorkspaceInfo> Put(const WorkspaceSpec& spec);
  Result<WorkspaceInfo> Get(const std::string& name);
  std::vector<WorkspaceInfo> List();
  Status Delete(const std::string& name);
  bool CheckToken(const std::string& name, const std::string& token);

  // One writer. Attach gives `holder` the workspace and returns its image
  // path: NotFound, FailedPrecondition naming the current holder (or a
  // Failed workspace). Release is a no-op unless `holder` holds it.
  Result<std::string> Attach(const std::string& name, const std::string& holder);
  void Release(const std::string& name, const std::string& holder);
  std::string Holder(const std::string& name);

  Status ReadFile(const std::string& name, const std::string& path,
                  const guest::client::FileChunkFn& on_chunk);
  Status WriteFile(const std::string& name, const std::string& path,
                   guest::protocol::ByteSpan data, uint32_t mode);
  Result<guest::protocol::StatReply> StatFile(const std::string& name, const std::string& path);
  Result<std::vector<guest::protocol::DirEntry>> ListFiles(const std::string& name,
                                                           const std::string& path);
  Status RemoveFile(const std::string& name, const std::string& path, bool recursive);

  std::string ImagePath(const std::string& name) const;
  uint64_t total_mib() const;

 private:
  struct Workspace {
    std::timed_mutex op_mu;        // file calls, attach, delete
    WorkspaceRecord rec;           // guarded by the store's mu_
    bool deleted = false;          // guarded by the store's mu_
  };
  explicit WorkspaceStore(WorkspaceStoreOptions options) : options_(std::move(options)) {}
  Status Load();
  Status MakeImage(const std::string& path, uint64_t size_mib);
  WorkspaceInfo InfoLocked(const Workspace& ws) const;
  std::shared_ptr<Workspace> Find(const std::string& name);
  // Runs `fn` with the workspace's lock held, nobody attached and the
  // journal replayed.
  Status WithDetached(const std::string& name, const std::function<Status()>& fn);
  Status ReplayJournalIfNeeded(const std::string& name);

  WorkspaceStoreOptions options_;
  ext4::Ext4Client helper_{options_.helper};
  std::mutex put_mu_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Workspace>> workspaces_;
};

}  // namespace kubicle::noderuntime
