// kubectl-kubicle's help texts (args.h, Usage).
#include "plugin/args.h"

namespace kubicle::plugin {

namespace {

constexpr char kGlobal[] = R"(
Cluster flags (any command, as kubectl takes them):
  --kubeconfig FILE          the kubeconfig (default: $KUBECONFIG, merged as
                             kubectl merges it, else ~/.kube/config)
  --context NAME             a context of it (default: the current one)
  -n, --namespace NS         the namespace (default: the context's, else default)
  --node-lease-namespace NS  where nodes publish their Leases and serving CA
                             (default kubicle-node-lease)
)";

constexpr char kTop[] = R"(kubectl kubicle: Kubicle sandboxes from kubectl.

Usage: kubectl kubicle COMMAND [flags]

Commands:
  exec SBX [-i] -- CMD...       run a command in a Sandbox's VM; streams its output
                                and exits with its exit code
  run TEMPLATE [-i] -- CMD...    run a command once in a VM restored from a
                                SandboxTemplate for this call alone; prints its
                                output and exits with its exit code
  cp SRC DST                    copy a file in or out: LOCAL SBX:/path or SBX:/path LOCAL
  fork SBX --replicas N [--wait]  N copy-on-write copies of a running Sandbox (a SandboxFork)
  sweep --run ID                delete the Sandboxes and SandboxForks of a run and wait
                                until every VM is gone
  logs SBX [-f]                 the VM's serial console (-f: follow)
  wait SBX --for=ready          wait until a Sandbox is Ready
  suspend SBX                   park a Sandbox on its node (spec.suspend: true) and
                                wait until it is Suspended
  resume SBX                    run it again (spec.suspend: false) and wait until Ready
  top [SBX...] [-l SELECTOR]    CPU and memory of each running Sandbox's VM
  port-forward SBX LOCAL:REMOTE  forward a local port to a TCP port of a Sandbox's VM

`kubectl kubicle COMMAND --help` describes one command.
)";

std::string VerbText(const std::string& verb) {
  if (verb == "run") {
    return R"(Usage: kubectl kubicle run TEMPLATE [-i] [--timeout 60s] [-e K=V]... [--cwd DIR] [--workspace WS] -- CMD [ARG...]

Runs CMD (an argv, no shell) once in a VM restored from the SandboxTemplate
for this call alone and discarded after it (a per-call run). A node where
the template is Ready is picked from its status.nodes[]; the run token is
read from the Secret its status.runTokenSecretName names (you need get on
it). The output is printed when the command ends; the exit code is the
command's (124 timed out, 128+N killed by signal N, 125 when kubectl-kubicle
itself failed).

Flags:
  -i, --stdin         send this process's stdin to the command (at most 512 KiB)
      --timeout D     the command's time limit (default 60s)
  -e, --env K=V       an environment variable (repeatable)
      --cwd DIR       the working directory
      --workspace WS  attach Workspace WS for the call (at /workspace); the run
                      goes to its node, and WS is free again when it ends
)";
  }
  if (verb == "exec") {
    return R"(Usage: kubectl kubicle exec SBX [-i] [--timeout 60s] [-e K=V]... [--cwd DIR] -- CMD [ARG...]

Runs CMD (an argv, no shell) in the Sandbox's VM through its node's data
plane with the Sandbox's token, streams stdout and stderr as the command
writes them, and exits with the command's exit code: 124 when it timed out,
128+N when signal N killed it, 125 when kubectl-kubicle itself failed.

  -i, --stdin        send this process's stdin to the command (read to its end
                     first; at most 512 KiB)
  --timeout D        the command's time limit (default 60s; 30s, 2m, 1h)
  -e, --env K=V      an environment variable (repeatable; the Sandbox's own
                     spec.env applies too)
  --cwd DIR          the working directory
There is no TTY: -t is refused.
)";
  }
  if (verb == "cp") {
    return R"(Usage: kubectl kubicle cp LOCAL SBX:/path
       kubectl kubicle cp SBX:/path LOCAL
       kubectl kubicle cp LOCAL ws/WS:/path
       kubectl kubicle cp ws/WS:/path LOCAL

Copies one file into or out of the Sandbox's VM (the node caps a file at
64 MiB), or of a Workspace's disk with no VM running (ws/ or workspace/
before its name; refused while a Sandbox or run holds it). LOCAL "-" is
stdin or stdout. An upload keeps the local file's permission bits. An
operand is remote when it has a ':' with a Sandbox name before it that
holds no '/', or ws/WS (so ./a:b and /tmp/a:b are local).
)";
  }
  if (verb == "fork") {
    return R"(Usage: kubectl kubicle fork SBX --replicas N [--wait] [--timeout 120s] [--name NAME] [-l K=V]...

Creates a SandboxFork of the running Sandbox SBX with N replicas (1..100):
the operator creates the children <fork>-0 .. <fork>-N-1 as copy-on-write
forks on SBX's node. Prints the fork's name; with --wait, waits until all
N children are Ready and prints their names. The fork carries SBX's
kubicle.dev/run and kubicle.dev/agent labels, so a sweep of the run takes it.

  --replicas N       how many children (required)
  --wait             wait until every child is Ready (exit 1 if one fails)
  --timeout D        how long --wait waits (default 120s)
  --name NAME        the fork's name (default SBX-f<random>)
  -l, --labels K=V   labels for every child (repeatable, or K=V,K2=V2)
)";
  }
  if (verb == "suspend" || verb == "resume") {
    return "Usage: kubectl kubicle " + verb + R"( SBX [--wait=false] [--timeout 120s]

suspend sets spec.suspend: true on the Sandbox SBX: its node snapshots the
VM's memory, devices and disks to its own storage and stops it (phase
Suspended). resume sets it back to false: the node runs the VM again, on
the same node, with its files, memory and processes as they were, and it
is Ready again. The TTL keeps counting while suspended. Needs patch on
Sandboxes.

  --wait=false       only set spec.suspend, do not wait
  --timeout D        how long to wait (default 120s)
)";
  }
  if (verb == "sweep") {
    return R"(Usage: kubectl kubicle sweep --run ID [--timeout 120s]

Deletes every SandboxFork and Sandbox labelled kubicle.dev/run=ID in the
namespace and waits until every one of them is gone. A Sandbox is gone only
once its node has torn the VM down (the kubicle.dev/vm-teardown finalizer),
so when this returns no VM of the run is left. Exit 1 on timeout, naming
what is left.
)";
  }
  if (verb == "logs") {
    return R"(Usage: kubectl kubicle logs SBX [-f]

Prints the serial console of the Sandbox's VM as its node keeps it: the
current console log file, which kubicle-vmm bounds (rotated at 1 MiB by
default, rate limited). -f, --follow keeps printing what the guest writes
until the VM stops (or Ctrl-C).
)";
  }
  if (verb == "wait") {
    return R"(Usage: kubectl kubicle wait SBX --for=ready [--timeout 120s]

Waits (watching, not polling) until the Sandbox's Ready condition is True.
Exit 1 when the Sandbox failed (with the reason) or was deleted, or on
timeout. --for=delete waits until the Sandbox is gone instead.
)";
  }
  if (verb == "top") {
    return R"(Usage: kubectl kubicle top [SBX...] [-l SELECTOR] [--interval 1s]

CPU and memory of each running Sandbox's VM, from its node (the VM's
cgroup): CPU in millicores averaged over --interval (two samples), memory
in MiB with the VM's limit, the guest's vCPUs and RAM. Without names, every
running Sandbox of the namespace (matching -l SELECTOR, a label selector).
)";
  }
  if (verb == "port-forward") {
    return R"(Usage: kubectl kubicle port-forward SBX [LOCAL:]REMOTE [--address 127.0.0.1]

Listens on LOCAL and forwards every connection to TCP port REMOTE of the
Sandbox's VM, through its node's data plane with the Sandbox's token (TLS
verified against the node's CA), until interrupted (Ctrl-C). Each
connection is a stream of its own; one the node refuses (nothing listens
on REMOTE, the Sandbox has no network, too many streams) is closed and the
reason printed. PORT alone is the same port on both sides; :REMOTE picks a
free local port.

  --address ADDR     the local address to listen on (default 127.0.0.1)
)";
  }
  return "";
}

}  // namespace

std::string Usage(const std::string& verb) {
  if (verb.empty()) return std::string(kTop) + kGlobal;
  return VerbText(verb) + kGlobal;
}

}  // namespace kubicle::plugin
