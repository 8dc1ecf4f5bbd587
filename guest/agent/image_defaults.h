// ImageDefaults: what a container image's config asks of every process the
// agent starts, read once at start from /.kubicle/image.json (written into
// the root file system by the node's BuildRootfs, docs/images.md): Env,
// WorkingDir and User. An exec's own env is merged over Env, and its own
// cwd wins over WorkingDir; User applies to every exec (the protocol has no
// per-exec user).
//
// Contracts:
//  - The file is the image author's: it is read up to kMaxBytes, parsed by
//    a small strict JSON reader (depth and sizes bounded), and anything
//    wrong with it (too big, malformed, wrong types) is logged and ignored:
//    the agent starts with no defaults rather than not at all. A missing
//    file is no defaults, silently (rootfs images not made from an image).
//  - User is "name", "uid", "name:group", "uid:gid" (docker's forms),
//    resolved at each exec against the guest's /etc/passwd and /etc/group
//    (so warm-up commands that add the user count); numeric ids need no
//    entry. A name that resolves to nothing fails the exec, naming it.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kubicle::guest::agent {

inline constexpr const char* kImageConfigPath = "/.kubicle/image.json";

struct ImageDefaults {
  std::vector<std::string> env;  // "KEY=value"
  std::string working_dir;
  std::string user;
};

// The OCI config subset of image.json ("Env", "WorkingDir", "User"; other
// keys are skipped). InvalidArgument when it is not that.
Result<ImageDefaults> ParseImageDefaults(std::string_view json);
// The file's defaults, or none (see the contract above).
ImageDefaults LoadImageDefaults(const std::string& path);

struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary, from /etc/group
  std::string home;           // from /etc/passwd, when the user has an entry
};

// `user` against passwd and group files (the guest's by default).
Result<Credentials> ResolveUser(const std::string& user, const std::string& passwd = "/etc/passwd",
                                const std::string& group = "/etc/group");

}  // namespace kubicle::guest::agent
