// kubicle-nodectl's commands (docs/node.md, "kubicle-nodectl"). Each takes
// the arguments after its name and returns the process exit code; output
// goes to stdout, diagnostics to stderr.
#pragma once

#include <string>
#include <vector>

#include "noderuntime/client/node_client.h"

namespace kubicle::noderuntime::cli {

// Exit codes of kubicle-nodectl itself. `exec` returns the command's own
// code, so its own failures use 125 (as `docker run` does).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;   // the API refused or a check failed
inline constexpr int kExitUsage = 2;
inline constexpr int kExitExecError = 125;

using Argv = std::vector<std::string>;
// nodectl is a client of the node's API like any other (noderuntime/client).
using client::json;
using client::kQueryKeep;
using client::NodeClient;
using client::ParseLabelArgs;

int CmdTemplate(NodeClient& c, const Argv& args);
int CmdCreate(NodeClient& c, const Argv& args);
int CmdList(NodeClient& c, const Argv& args);
int CmdGet(NodeClient& c, const Argv& args);
int CmdExec(NodeClient& c, const Argv& args);
int CmdPutFile(NodeClient& c, const Argv& args);
int CmdGetFile(NodeClient& c, const Argv& args);
int CmdFork(NodeClient& c, const Argv& args);
int CmdRemove(NodeClient& c, const Argv& args);
int CmdSwarm(NodeClient& c, const Argv& args);

// Left-aligned columns separated by two spaces; the first row is the header.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);
// Prints "kubicle-nodectl: <what>: <status>" to stderr and returns kExitFailed.
int Fail(const std::string& what, const Status& st);

}  // namespace kubicle::noderuntime::cli
