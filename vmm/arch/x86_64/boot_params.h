// Our own definition of Linux's x86 boot protocol structures (struct
// boot_params, the "zero page", and struct setup_header), byte-compatible
// with arch/x86/include/uapi/asm/bootparam.h and documented in the kernel's
// Documentation/arch/x86/boot.rst. Every field the VMM reads or writes has
// its offset pinned by a static_assert against the documented value, so a
// layout mistake is a compile error rather than a kernel that fails to boot.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kubicle::vmm::arch {

inline constexpr uint32_t kSetupHeaderMagic = 0x53726448;  // "HdrS"
inline constexpr uint16_t kBootFlagMagic = 0xaa55;
inline constexpr uint16_t kMinBootProtocol = 0x020c;  // 2.12: xloadflags, 64-bit entry
inline constexpr uint8_t kTypeOfLoaderUndefined = 0xff;
inline constexpr uint16_t kVidModeNormal = 0xffff;
// loadflags
inline constexpr uint8_t kLoadedHigh = 0x01;
inline constexpr uint8_t kKeepSegments = 0x40;
inline constexpr uint8_t kCanUseHeap = 0x80;
// xloadflags
inline constexpr uint16_t kXlfKernel64 = 0x01;
inline constexpr uint16_t kXlfCanBeLoadedAbove4G = 0x02;
// e820 types
inline constexpr uint32_t kE820Ram = 1;
inline constexpr uint32_t kE820Reserved = 2;
inline constexpr size_t kE820MaxEntries = 128;  // E820_MAX_ENTRIES_ZEROPAGE

#pragma pack(push, 1)

struct SetupHeader {
  uint8_t setup_sects;
  uint16_t root_flags;
  uint32_t syssize;
  uint16_t ram_size;
  uint16_t vid_mode;
  uint16_t root_dev;
  uint16_t boot_flag;
  uint16_t jump;
  uint32_t header;
  uint16_t version;
  uint32_t realmode_swtch;
  uint16_t start_sys_seg;
  uint16_t kernel_version;
  uint8_t type_of_loader;
  uint8_t loadflags;
  uint16_t setup_move_size;
  uint32_t code32_start;
  uint32_t ramdisk_image;
  uint32_t ramdisk_size;
  uint32_t bootsect_kludge;
  uint16_t heap_end_ptr;
  uint8_t ext_loader_ver;
  uint8_t ext_loader_type;
  uint32_t cmd_line_ptr;
  uint32_t initrd_addr_max;
  uint32_t kernel_alignment;
  uint8_t relocatable_kernel;
  uint8_t min_alignment;
  uint16_t xloadflags;
  uint32_t cmdline_size;
  uint32_t hardware_subarch;
  uint64_t hardware_subarch_data;
  uint32_t payload_offset;
  uint32_t payload_length;
  uint64_t setup_data;
  uint64_t pref_address;
  uint32_t init_size;
  uint32_t handover_offset;
  uint32_t kernel_info_offset;
};
static_assert(sizeof(SetupHeader) == 0x26c - 0x1f1);

struct E820Entry {
  uint64_t addr;
  uint64_t size;
  uint32_t type;
};
static_assert(sizeof(E820Entry) == 20);

struct BootParams {
  uint8_t screen_info[0x40];        // 0x000
  uint8_t apm_bios_info[0x14];      // 0x040
  uint8_t pad2[4];                  // 0x054
  uint64_t tboot_addr;              // 0x058
  uint8_t ist_info[0x10];           // 0x060
  uint64_t acpi_rsdp_addr;          // 0x070
  uint8_t pad3[8];                  // 0x078
  uint8_t hd0_info[16];             // 0x080
  uint8_t hd1_info[16];             // 0x090
  uint8_t sys_desc_table[0x10];     // 0x0a0
  uint8_t olpc_ofw_header[0x10];    // 0x0b0
  uint32_t ext_ramdisk_image;       // 0x0c0
  uint32_t ext_ramdisk_size;        // 0x0c4
  uint32_t ext_cmd_line_ptr;        // 0x0c8
  uint8_t pad4[112];                // 0x0cc
  uint32_t cc_blob_address;         // 0x13c
  uint8_t edid_info[0x80];          // 0x140
  uint8_t efi_info[0x20];           // 0x1c0
  uint32_t alt_mem_k;               // 0x1e0
  uint32_t scratch;                 // 0x1e4
  uint8_t e820_entries;             // 0x1e8
  uint8_t eddbuf_entries;           // 0x1e9
  uint8_t edd_mbr_sig_buf_entries;  // 0x1ea
  uint8_t kbd_status;               // 0x1eb
  uint8_t secure_boot;              // 0x1ec
  uint8_t pad5[2];                  // 0x1ed
  uint8_t sentinel;                 // 0x1ef
  uint8_t pad6[1];                  // 0x1f0
  SetupHeader hdr;                  // 0x1f1
  uint8_t pad7[0x290 - 0x1f1 - sizeof(SetupHeader)];
  uint32_t edd_mbr_sig_buffer[16];           // 0x290
  E820Entry e820_table[kE820MaxEntries];     // 0x2d0
  uint8_t pad8[48];                          // 0xcd0
  uint8_t eddbuf[6 * 82];                    // 0xd00
  uint8_t pad9[276];                         // 0xeec
};

#pragma pack(pop)

static_assert(sizeof(BootParams) == 4096);
// Offsets from Documentation/arch/x86/zero-page.rst and boot.rst.
#define KUBICLE_ZP_OFFSET(field, off) static_assert(offsetof(BootParams, field) == (off), #field)
KUBICLE_ZP_OFFSET(acpi_rsdp_addr, 0x070);
KUBICLE_ZP_OFFSET(ext_ramdisk_image, 0x0c0);
KUBICLE_ZP_OFFSET(ext_ramdisk_size, 0x0c4);
KUBICLE_ZP_OFFSET(ext_cmd_line_ptr, 0x0c8);
KUBICLE_ZP_OFFSET(cc_blob_address, 0x13c);
KUBICLE_ZP_OFFSET(alt_mem_k, 0x1e0);
KUBICLE_ZP_OFFSET(e820_entries, 0x1e8);
KUBICLE_ZP_OFFSET(sentinel, 0x1ef);
KUBICLE_ZP_OFFSET(hdr, 0x1f1);
KUBICLE_ZP_OFFSET(hdr.setup_sects, 0x1f1);
KUBICLE_ZP_OFFSET(hdr.vid_mode, 0x1fa);
KUBICLE_ZP_OFFSET(hdr.boot_flag, 0x1fe);
KUBICLE_ZP_OFFSET(hdr.jump, 0x200);
KUBICLE_ZP_OFFSET(hdr.header, 0x202);
KUBICLE_ZP_OFFSET(hdr.version, 0x206);
KUBICLE_ZP_OFFSET(hdr.type_of_loader, 0x210);
KUBICLE_ZP_OFFSET(hdr.loadflags, 0x211);
KUBICLE_ZP_OFFSET(hdr.code32_start, 0x214);
KUBICLE_ZP_OFFSET(hdr.ramdisk_image, 0x218);
KUBICLE_ZP_OFFSET(hdr.ramdisk_size, 0x21c);
KUBICLE_ZP_OFFSET(hdr.heap_end_ptr, 0x224);
KUBICLE_ZP_OFFSET(hdr.cmd_line_ptr, 0x228);
KUBICLE_ZP_OFFSET(hdr.initrd_addr_max, 0x22c);
KUBICLE_ZP_OFFSET(hdr.kernel_alignment, 0x230);
KUBICLE_ZP_OFFSET(hdr.relocatable_kernel, 0x234);
KUBICLE_ZP_OFFSET(hdr.xloadflags, 0x236);
KUBICLE_ZP_OFFSET(hdr.cmdline_size, 0x238);
KUBICLE_ZP_OFFSET(hdr.pref_address, 0x258);
KUBICLE_ZP_OFFSET(hdr.init_size, 0x260);
KUBICLE_ZP_OFFSET(edd_mbr_sig_buffer, 0x290);
KUBICLE_ZP_OFFSET(e820_table, 0x2d0);
KUBICLE_ZP_OFFSET(eddbuf, 0xd00);
#undef KUBICLE_ZP_OFFSET

// Offsets of the setup header inside a bzImage file (same as in the zero
// page: the real-mode setup code is loaded at offset 0).
inline constexpr size_t kSetupHeaderOffset = offsetof(BootParams, hdr);

}  // namespace kubicle::vmm::arch
