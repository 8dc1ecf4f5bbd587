// kubicle-nodectl: command-line client for kubicle-node's HTTP API.
#include <cstdio>
#include <cstdlib>
#include <map>

#include "common/cli_exit.h"
#include "common/file_io.h"
#include "noderuntime/cli/args.h"
#include "noderuntime/cli/commands.h"

namespace kubicle::noderuntime::cli {
namespace {

constexpr char kUsage[] = R"(usage: kubicle-nodectl [--server URL] [--token-file FILE] [--ca-file FILE]
                       COMMAND ...
(every flag also as --flag=value)

Talks to a kubicle-node (docs/node.md). The server defaults to
$KUBICLE_NODE_URL or http://127.0.0.1:7070; the token is read from
--token-file, else $KUBICLE_NODE_TOKEN (the token itself), else
$KUBICLE_NODE_TOKEN_FILE. For an https:// server, --ca-file (or
$KUBICLE_NODE_CA_FILE) is the PEM CA the node's certificate must chain to:
its DIR/tls/ca.crt, or its Lease's kubicle.dev/serving-ca annotation.

commands:
  template put NAME --kernel K [--initrd I] [--cmdline C] [--disk D]...
               [--mem MIB] [--vcpus N] [--warmup CMD]... [--wait]
  template ls | get NAME | rm NAME
  create --template T [-l k=v]... [--ttl S] [--count N] [--id ID]
  ls [-l SELECTOR]
  get ID
  exec ID [-i] [--timeout S] [-e K=V]... [--cwd DIR] (-- ARGV... | --shell CMD)
        -i sends this program's stdin to the command
        streams output; exits with the command's code (125: kubicle-nodectl
        failed, 124: timed out, 128+N: killed by signal N)
  put-file ID LOCAL REMOTE [--mode 0644]     ('-' reads stdin)
  get-file ID REMOTE LOCAL                   ('-' writes stdout)
  fork ID [--count N] [-l k=v]... [--ttl S]
  rm ID... | rm -l SELECTOR
  swarm --template T [--count 20] [--run ID] [--ttl S] [--keep]
        [--shell CMD | -- ARGV...]    (default command: hostname)
        N sandboxes labelled kubicle.dev/run=ID in parallel, the command in
        each, a table of results and latencies, then one sweep by label.
)";

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

Result<std::string> ReadToken(const std::string& file) {
  auto text = ReadFileToString(file);
  if (!text.ok()) return Status::NotFound("cannot read token file: " + text.status().message());
  std::string t = Trim(std::move(*text));
  if (t.empty()) return Status::InvalidArgument("token file " + file + " is empty");
  return t;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const char* env_url = std::getenv("KUBICLE_NODE_URL");
  auto global = ParseGlobalFlags(args);
  if (!global.ok()) {
    std::fprintf(stderr, "kubicle-nodectl: %s\n%s", global.status().message().c_str(), kUsage);
    return kExitUsage;
  }
  if (global->help) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  std::string server = !global->server.empty() ? global->server
                       : env_url               ? env_url
                                               : "http://127.0.0.1:7070";
  const std::string& token_file = global->token_file;
  const size_t i = global->command;
  if (i >= args.size()) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  const std::string cmd = args[i];
  Argv rest(args.begin() + static_cast<long>(i) + 1, args.end());
  using Fn = int (*)(NodeClient&, const Argv&);
  static const std::map<std::string, Fn> kCommands = {
      {"template", CmdTemplate}, {"create", CmdCreate},     {"ls", CmdList},
      {"get", CmdGet},           {"exec", CmdExec},         {"put-file", CmdPutFile},
      {"get-file", CmdGetFile},  {"fork", CmdFork},         {"rm", CmdRemove},
      {"swarm", CmdSwarm}};
  auto it = kCommands.find(cmd);
  if (it == kCommands.end()) {
    std::fprintf(stderr, "kubicle-nodectl: unknown command \"%s\" (see --help)\n", cmd.c_str());
    return kExitUsage;
  }
  std::string token;
  const char* env_token = std::getenv("KUBICLE_NODE_TOKEN");
  const char* env_token_file = std::getenv("KUBICLE_NODE_TOKEN_FILE");
  if (!token_file.empty() || (!env_token && env_token_file)) {
    auto t = ReadToken(!token_file.empty() ? token_file : env_token_file);
    if (!t.ok()) return Fail("token", t.status());
    token = *t;
  } else if (env_token) {
    token = Trim(env_token);
  }
  if (token.empty()) {
    std::fprintf(stderr, "kubicle-nodectl: no token: pass --token-file or set KUBICLE_NODE_TOKEN\n");
    return kExitUsage;
  }
  const char* env_ca = std::getenv("KUBICLE_NODE_CA_FILE");
  const std::string ca_file = !global->ca_file.empty() ? global->ca_file : env_ca ? env_ca : "";
  auto client = NodeClient::Create(server, token, ca_file);
  if (!client.ok()) return Fail("server", client.status());
  int rc = it->second(**client, rest);
  std::fflush(stdout);
  return rc;
}

}  // namespace
}  // namespace kubicle::noderuntime::cli

int main(int argc, char** argv) { kubicle::ExitCli(kubicle::noderuntime::cli::Main(argc, argv)); }
