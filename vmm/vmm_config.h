// kubicle-vmm's command line: its LaunchSpec (launch_spec.h, the typed
// contract shared with whoever starts a VMM) parsed and then checked against
// this host before any KVM object exists, so a bad flag or a missing file
// is a clear usage error (exit code 1) and never a half-built VM.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "vmm/launch_spec.h"

namespace kubicle::vmm {

// What LaunchSpec::Parse cannot know: the kernel, initrd and disk images
// are files here, --layer-dir is a directory, and run's and pool's memory
// size fits the architecture (restore's comes from its snapshot).
Status CheckOnHost(const LaunchSpec& spec);

// kubicle-vmm's arguments after the binary (the mode first): Parse, then
// CheckOnHost. Does not touch KVM.
Result<LaunchSpec> ParseCommandLine(const std::vector<std::string>& argv);

// The same for one mode's arguments (argv without the mode word):
// `kubicle-vmm run` (the kernel exists, sizes are in range, guest CID >= 3),
// `kubicle-vmm restore` (--snapshot DIR plus the new identity; --kernel,
// --mem, --vcpus, --disk and --cmdline are refused: the machine's shape
// comes from the snapshot) and `kubicle-vmm pool` (the shape, --control,
// identity defaults for the restore request).
Result<LaunchSpec> ParseRunArgs(const std::vector<std::string>& args);
Result<LaunchSpec> ParseRestoreArgs(const std::vector<std::string>& args);
Result<LaunchSpec> ParsePoolArgs(const std::vector<std::string>& args);

// The text printed for `kubicle-vmm --help`.
std::string UsageText();

}  // namespace kubicle::vmm
