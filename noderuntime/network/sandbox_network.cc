#include "noderuntime/network/sandbox_network.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <sstream>

#include "common/log.h"
#include "noderuntime/network/guest_network.h"

namespace kubicle::noderuntime::network {
namespace {

namespace fs = std::filesystem;

constexpr char kSlotPrefix[] = "slot-";

// Words of one line of `ip -o` output.
std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

bool IsRouteType(const std::string& w) {
  for (const char* t : {"unicast", "local", "broadcast", "multicast", "throw", "unreachable",
                        "prohibit", "blackhole", "nat", "anycast"})
    if (w == t) return true;
  return false;
}

// "slot-<N>" with N decimal, as this node names its namespace files.
std::optional<uint32_t> SlotOfName(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  uint32_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + uint32_t(c - '0');
  }
  return v;
}

bool ValidTag(const std::string& tag) {
  if (tag.empty() || tag.size() > 4) return false;
  for (char c : tag)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  return true;
}

// Paths go into `ip -batch` lines: nothing that would split or quote them.
bool PlainPath(const std::string& p) {
  if (p.empty() || p[0] != '/' || p.size() > 200) return false;
  for (char c : p)
    if (c <= ' ' || c == '"' || c == '\'' || c == '\\' || c == '#' || c == 127) return false;
  return true;
}

bool IsDefaultPolicy(const EgressPolicy& p) { return p == EgressPolicy{}; }

}  // namespace

SandboxNetwork::SandboxNetwork(Options options, AddressPlan plan)
    : options_(std::move(options)), plan_(plan) {
  inputs_.sandbox_cidr = plan_.cidr();
}

SandboxNetwork::~SandboxNetwork() { Stop(false); }

Result<std::unique_ptr<SandboxNetwork>> SandboxNetwork::Open(Options options) {
  if (options.system == nullptr) return Status::InvalidArgument("sandbox network: no NetSystem");
  if (!ValidTag(options.tag)) return Status::InvalidArgument("sandbox network: tag must be 1..4 of [a-z0-9]");
  if (!PlainPath(options.netns_dir))
    return Status::InvalidArgument("sandbox network: '" + options.netns_dir +
                                   "' is not an absolute path without spaces or quotes");
  ASSIGN_OR_RETURN(AddressPlan plan, AddressPlan::For(options.cidr));
  std::error_code ec;
  fs::create_directories(options.netns_dir, ec);
  if (ec) return Status::Internal("create " + options.netns_dir + ": " + ec.message());
  std::unique_ptr<SandboxNetwork> n(new SandboxNetwork(std::move(options), plan));
  RETURN_IF_ERROR(n->options_.system->Preflight());
  RETURN_IF_ERROR(n->CheckNoOverlap());
  RETURN_IF_ERROR(n->ReadNodeAddresses());
  NetSystem& sys = *n->options_.system;
  RETURN_IF_ERROR(sys.Sysctl("", "net/ipv4/ip_forward", "1").WithContext("turning on the host's IPv4 forwarding"));
  RETURN_IF_ERROR(sys.Nft("", RenderHostRuleset(n->host_table(), plan.cidr(), "kh" + n->options_.tag + "-*"))
                      .WithContext("installing the host's nftables table (the kernel needs nf_tables)"));
  return n;
}

Status SandboxNetwork::CheckNoOverlap() {
  ASSIGN_OR_RETURN(std::string routes, options_.system->IpQuery({"route", "show", "table", "all"}));
  const std::string own_dev = "kh" + options_.tag + "-";
  for (const std::string& line : Lines(routes)) {
    std::vector<std::string> w = Words(line);
    if (w.empty()) continue;
    bool ours = false;
    for (size_t i = 0; i + 1 < w.size(); ++i)
      ours = ours || (w[i] == "dev" && w[i + 1].compare(0, own_dev.size(), own_dev) == 0);
    if (ours) continue;
    const std::string& dst = IsRouteType(w[0]) && w.size() > 1 ? w[1] : w[0];
    if (dst == "default") continue;  // 0/0 overlaps everything by definition
    auto c = ParseCidr(dst, /*allow_bare=*/true);
    if (!c.ok()) continue;  // not a destination (an unusual route type): not ours to judge
    if (c->Overlaps(plan_.cidr()))
      return Status::FailedPrecondition("sandbox network " + plan_.cidr().ToString() +
                                        " overlaps the host's route '" + line.substr(0, 120) +
                                        "': choose another --sandbox-network-cidr");
  }
  return Status::Ok();
}

Status SandboxNetwork::ReadNodeAddresses() {
  ASSIGN_OR_RETURN(std::string addrs, options_.system->IpQuery({"addr", "show"}));
  for (const std::string& line : Lines(addrs)) {
    std::vector<std::string> w = Words(line);
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      if (w[i] != "inet") continue;
      const std::string a = w[i + 1].substr(0, w[i + 1].find('/'));
      if (auto ip = ParseIpv4(a); ip.ok()) inputs_.node_addresses.push_back(*ip);
    }
  }
  return Status::Ok();
}

std::string SandboxNetwork::NetnsPath(uint32_t index) const {
  return options_.netns_dir + "/" + kSlotPrefix + std::to_string(index);
}

std::string SandboxNetwork::HostVeth(uint32_t index) const {
  return "kh" + options_.tag + "-" + std::to_string(index);
}

NetworkSlot SandboxNetwork::SlotOf(uint32_t index) const {
  return {index, NetnsPath(index), HostVeth(index), plan_.Of(index)};
}

Status SandboxNetwork::Build(const NetworkSlot& s, const EgressPolicy& policy) {
  NetSystem& sys = *options_.system;
  const std::string host = s.addresses.host.ToString(), ns = s.addresses.sandbox.ToString();
  const std::string prefix = "/" + std::to_string(SlotAddresses::kPrefix);
  RETURN_IF_ERROR(sys.CreateNetns(s.netns));
  // The peer is born inside the namespace, so its name never meets the host's.
  RETURN_IF_ERROR(sys.IpBatch("", "link add " + s.host_veth + " type veth peer name veth0 netns " + s.netns +
                                      "\naddr add " + host + prefix + " dev " + s.host_veth +
                                      "\nlink set " + s.host_veth + " up\n"));
  RETURN_IF_ERROR(sys.IpBatch(s.netns, "link set lo up\nlink set veth0 up\naddr add " + ns + prefix +
                                           " dev veth0\nroute add default via " + host +
                                           "\ntuntap add " + kTapName + " mode tap\nlink set " + kTapName +
                                           " address " + kGatewayMac + "\naddr add " + kGatewayAddress + "/" +
                                           std::to_string(kGuestPrefixLength) + " dev " + kTapName +
                                           "\nlink set " + kTapName + " up\n"));
  RETURN_IF_ERROR(sys.Sysctl(s.netns, "net/ipv4/ip_forward", "1"));
  return sys.Nft(s.netns, RenderSandboxRuleset(policy, inputs_));
}

Status SandboxNetwork::BuildCounted(const NetworkSlot& s, const EgressPolicy& policy) {
  const auto start = std::chrono::steady_clock::now();
  Status st = Build(s, policy);
  if (!st.ok()) {
    {
      std::lock_guard l(mu_);
      ++build_failures_;
    }
    if (options_.on_build_failed) options_.on_build_failed();
    return st;
  }
  if (options_.on_built)
    options_.on_built(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return st;
}

void SandboxNetwork::TearDown(uint32_t index) {
  // Deleting the host end takes the namespace end with it, now rather than
  // whenever the namespace itself goes away.
  Status link = options_.system->IpBatch("", "link del " + HostVeth(index) + "\n");
  Status ns = options_.system->DeleteNetns(NetnsPath(index));
  if (!ns.ok()) log::Warn("sandbox netns removal failed", {{"slot", index}, {"error", ns.ToString()}});
  (void)link;  // absent when a build failed early: not an error
}

Result<uint32_t> SandboxNetwork::TakeFreeIndexLocked() {
  uint32_t i = 0;
  for (uint32_t t : taken_) {  // ordered: the first gap
    if (t != i) break;
    ++i;
  }
  if (i >= plan_.slots())
    return Status::ResourceExhausted("sandbox network " + plan_.cidr().ToString() + " has no free slot (" +
                                     std::to_string(plan_.slots()) + " in all)");
  taken_.insert(i);
  return i;
}

Result<NetworkSlot> SandboxNetwork::Adopt(uint32_t index) {
  if (index >= plan_.slots())
    return Status::InvalidArgument("slot " + std::to_string(index) + " is outside " + plan_.cidr().ToString());
  struct stat st;
  if (::stat(NetnsPath(index).c_str(), &st) != 0) return Status::NotFound("no namespace " + NetnsPath(index));
  std::lock_guard l(mu_);
  if (!taken_.insert(index).second) return Status::AlreadyExists("slot " + std::to_string(index) + " is held");
  in_use_.insert(index);
  return SlotOf(index);
}

Status SandboxNetwork::Start() {
  SweepOrphans();
  uint32_t index;
  {
    std::lock_guard l(mu_);
    if (started_) return Status::Ok();
    ASSIGN_OR_RETURN(index, TakeFreeIndexLocked());
    ++building_;
  }
  // Built here, not on the worker: what the host refuses (capabilities,
  // /dev/net/tun, bind mounts on netns_dir) fails the node's start with
  // its reason instead of every create later.
  const NetworkSlot first = SlotOf(index);
  Status st = BuildCounted(first, EgressPolicy{});
  const bool keep = st.ok() && options_.pool_size > 0;
  if (!keep) TearDown(index);  // a failure's halves, or a slot no pool wants
  std::lock_guard l(mu_);
  --building_;
  if (st.ok()) ++built_;
  if (keep) {
    pool_.push_back(first);
  } else {
    taken_.erase(index);
    if (st.ok()) ++released_;
  }
  if (!st.ok()) return st.WithContext("building a first sandbox network slot");
  started_ = true;
  worker_ = std::thread([this] { Work(); });
  return Status::Ok();
}

size_t SandboxNetwork::SweepOrphans() {
  std::set<uint32_t> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.netns_dir, ec))
    if (auto i = SlotOfName(e.path().filename().string(), kSlotPrefix)) found.insert(*i);
  auto links = options_.system->IpQuery({"link", "show"});
  if (links.ok()) {
    for (const std::string& line : Lines(*links)) {
      std::vector<std::string> w = Words(line);
      if (w.size() < 2) continue;
      std::string name = w[1].substr(0, w[1].find_first_of("@:"));
      if (auto i = SlotOfName(name, "kh" + options_.tag + "-")) found.insert(*i);
    }
  }
  std::vector<uint32_t> orphans;
  {
    std::lock_guard l(mu_);
    for (uint32_t i : found)
      if (taken_.insert(i).second) orphans.push_back(i);  // held while swept
  }
  for (uint32_t i : orphans) TearDown(i);
  std::lock_guard l(mu_);
  for (uint32_t i : orphans) taken_.erase(i);
  orphans_swept_ += orphans.size();
  if (!orphans.empty()) {
    log::Warn("removed orphan sandbox namespaces", {{"count", orphans.size()}});
    if (options_.on_orphans_swept) options_.on_orphans_swept(orphans.size());
  }
  return orphans.size();
}

Result<NetworkSlot> SandboxNetwork::Acquire(const EgressPolicy& policy) {
  NetworkSlot slot;
  bool pooled = false;
  {
    std::lock_guard l(mu_);
    if (stopping_ || !started_) return Status::Unavailable("the sandbox network is not running");
    if (!pool_.empty()) {
      slot = std::move(pool_.front());
      pool_.pop_front();
      in_use_.insert(slot.index);
      pooled = true;
      cv_.notify_all();  // the worker refills
    } else {
      ASSIGN_OR_RETURN(uint32_t index, TakeFreeIndexLocked());
      slot = SlotOf(index);
      ++building_;
    }
  }
  if (pooled) {
    // Pool slots carry the default policy already.
    if (IsDefaultPolicy(policy)) return slot;
    Status st = ApplyPolicy(slot.index, policy);
    if (!st.ok()) {
      Release(slot.index);
      return st;
    }
    return slot;
  }
  Status st = BuildCounted(slot, policy);
  std::lock_guard l(mu_);
  --building_;
  if (!st.ok()) {
    releasing_.push_back(slot.index);  // whatever half of it exists
    cv_.notify_all();
    return st.WithContext("building sandbox network slot " + std::to_string(slot.index));
  }
  ++built_;
  in_use_.insert(slot.index);
  return slot;
}

Status SandboxNetwork::ApplyPolicy(uint32_t index, const EgressPolicy& policy) {
  return options_.system->Nft(NetnsPath(index), RenderEgressUpdate(policy, inputs_))
      .WithContext("egress policy of slot " + std::to_string(index));
}

void SandboxNetwork::Release(uint32_t index) {
  bool inline_teardown;
  {
    std::lock_guard l(mu_);
    if (!in_use_.erase(index)) return;
    inline_teardown = !started_ || stopping_;
    if (!inline_teardown) {
      releasing_.push_back(index);
      cv_.notify_all();
      return;
    }
    ++tearing_down_;
  }
  TearDown(index);
  std::lock_guard l(mu_);
  --tearing_down_;
  taken_.erase(index);
  ++released_;
}

bool SandboxNetwork::WorkToDoLocked() const {
  return stopping_ || !releasing_.empty() || pool_.size() + pool_building_ < options_.pool_size;
}

void SandboxNetwork::Work() {
  std::unique_lock l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return WorkToDoLocked(); });
    if (!releasing_.empty()) {  // first: a release frees an index for the pool
      const uint32_t index = releasing_.front();
      releasing_.pop_front();
      ++tearing_down_;
      l.unlock();
      TearDown(index);
      l.lock();
      --tearing_down_;
      taken_.erase(index);
      ++released_;
      continue;
    }
    if (stopping_) return;
    auto index = TakeFreeIndexLocked();
    if (!index.ok()) {  // full: wait for a release
      cv_.wait(l, [&] { return stopping_ || !releasing_.empty(); });
      continue;
    }
    ++pool_building_;
    l.unlock();
    NetworkSlot slot = SlotOf(*index);
    Status st = BuildCounted(slot, EgressPolicy{});
    l.lock();
    --pool_building_;
    if (!st.ok()) {
      log::Warn("sandbox network pool build failed", {{"slot", *index}, {"error", st.ToString()}});
      releasing_.push_back(*index);
      // Do not spin on a host that refuses: the next try comes with the next Acquire.
      cv_.wait_for(l, std::chrono::seconds(5), [&] { return stopping_; });
      continue;
    }
    ++built_;
    pool_.push_back(std::move(slot));
  }
}

void SandboxNetwork::Stop(bool remove_host_table) {
  std::deque<NetworkSlot> idle;
  {
    std::lock_guard l(mu_);
    if (stopping_ && !worker_.joinable() && !remove_host_table) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();  // it finishes queued releases first
  {
    std::lock_guard l(mu_);
    idle.swap(pool_);
  }
  for (const NetworkSlot& s : idle) {
    TearDown(s.index);
    std::lock_guard l(mu_);
    taken_.erase(s.index);
    ++released_;
  }
  if (remove_host_table) {
    bool none_in_use;
    {
      std::lock_guard l(mu_);
      none_in_use = in_use_.empty();
    }
    if (none_in_use) (void)options_.system->Nft("", RenderHostRulesetRemoval(host_table()));
  }
}

SandboxNetwork::Census SandboxNetwork::census() const {
  std::lock_guard l(mu_);
  Census c;
  c.pooled = pool_.size();
  c.in_use = in_use_.size();
  c.building = building_ + pool_building_;
  c.releasing = releasing_.size() + tearing_down_;
  c.built = built_;
  c.released = released_;
  c.build_failures = build_failures_;
  c.orphans_swept = orphans_swept_;
  c.capacity = plan_.slots();
  c.free = c.capacity - std::min(c.capacity, taken_.size());
  return c;
}

}  // namespace kubicle::noderuntime::network
