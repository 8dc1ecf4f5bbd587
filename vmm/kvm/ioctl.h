// Internal helpers shared by the KVM fd wrappers: an ioctl that retries on
// EINTR (for every KVM ioctl except KVM_RUN, where EINTR is a result the
// caller must see) and a buffer for KVM's "header + flexible array" structs
// (kvm_cpuid2, kvm_msrs, kvm_msr_list). Not part of the public API.
//
// Why our own headers and request numbers: the uapi headers declare those
// flexible arrays with __DECLARE_FLEX_ARRAY, whose empty struct has size 1
// in C++ (0 in C). In C++ sizeof(kvm_cpuid2) becomes 12 instead of 8, which
// both moves `entries` and changes the size encoded in the ioctl number, so
// KVM rejects the call with EINVAL. We declare the C layout and numbers here
// and pin them to the values a C compiler produces.
#pragma once

#include <linux/kvm.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace kubicle::vmm::kvm::internal {

struct CpuidHeader {  // struct kvm_cpuid2 without its entries
  uint32_t nent;
  uint32_t padding;
};
struct MsrsHeader {  // struct kvm_msrs without its entries
  uint32_t nmsrs;
  uint32_t pad;
};
struct MsrListHeader {  // struct kvm_msr_list without its indices
  uint32_t nmsrs;
};
struct XsaveFixed {  // struct kvm_xsave without the XSAVE2 tail
  uint32_t region[1024];
};

inline constexpr unsigned long kGetSupportedCpuid = _IOWR(KVMIO, 0x05, CpuidHeader);
inline constexpr unsigned long kGetMsrIndexList = _IOWR(KVMIO, 0x02, MsrListHeader);
inline constexpr unsigned long kGetMsrFeatureIndexList = _IOWR(KVMIO, 0x0a, MsrListHeader);
inline constexpr unsigned long kGetMsrs = _IOWR(KVMIO, 0x88, MsrsHeader);
inline constexpr unsigned long kSetMsrs = _IOW(KVMIO, 0x89, MsrsHeader);
inline constexpr unsigned long kSetCpuid2 = _IOW(KVMIO, 0x90, CpuidHeader);
inline constexpr unsigned long kGetCpuid2 = _IOWR(KVMIO, 0x91, CpuidHeader);
inline constexpr unsigned long kGetXsave = _IOR(KVMIO, 0xa4, XsaveFixed);
inline constexpr unsigned long kSetXsave = _IOW(KVMIO, 0xa5, XsaveFixed);
inline constexpr unsigned long kGetXsave2 = _IOR(KVMIO, 0xcf, XsaveFixed);

// The values <linux/kvm.h> gives in C on x86-64.
static_assert(kGetSupportedCpuid == 0xc008ae05);
static_assert(kGetMsrIndexList == 0xc004ae02);
static_assert(kGetMsrFeatureIndexList == 0xc004ae0a);
static_assert(kGetMsrs == 0xc008ae88);
static_assert(kSetMsrs == 0x4008ae89);
static_assert(kSetCpuid2 == 0x4008ae90);
static_assert(kGetCpuid2 == 0xc008ae91);
static_assert(kGetXsave == 0x9000aea4);
static_assert(kSetXsave == 0x5000aea5);
static_assert(kGetXsave2 == 0x9000aecf);

// Returns ioctl's result; retries while it fails with EINTR.
template <typename Arg>
int IoctlRetry(int fd, unsigned long request, Arg arg) {
  int r;
  do {
    r = ::ioctl(fd, request, arg);
  } while (r < 0 && errno == EINTR);
  return r;
}

// Owns a zeroed, suitably aligned Header followed by `count` Entry slots, as
// KVM's variable-length structs are laid out. Header must end in a
// zero-length (flexible) array of Entry.
template <typename Header, typename Entry>
class FamBuffer {
 public:
  explicit FamBuffer(size_t count)
      : count_(count),
        bytes_(sizeof(Header) + count * sizeof(Entry)),
        storage_(static_cast<std::byte*>(
            ::operator new(bytes_, std::align_val_t{alignof(std::max_align_t)}))) {
    std::fill_n(storage_.get(), bytes_, std::byte{0});
  }
  Header* header() { return reinterpret_cast<Header*>(storage_.get()); }
  Entry* entries() { return reinterpret_cast<Entry*>(storage_.get() + sizeof(Header)); }
  size_t capacity() const { return count_; }

 private:
  struct Deleter {
    void operator()(std::byte* p) const {
      ::operator delete(p, std::align_val_t{alignof(std::max_align_t)});
    }
  };
  size_t count_;
  size_t bytes_;
  std::unique_ptr<std::byte, Deleter> storage_;
};

}  // namespace kubicle::vmm::kvm::internal
