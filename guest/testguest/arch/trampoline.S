/* Real-mode trampoline for application processors. kmain copies
 * [ap_trampoline_start, ap_trampoline_end) to AP_TRAMPOLINE_BASE (0x6000:
 * below 1 MiB, page aligned, clear of the VMM's boot structures at 0x500,
 * 0x7000-0x8fff and 0x9000-0xbfff) and sends INIT-SIPI-SIPI with vector 0x06.
 *
 * Each AP goes real mode -> 32-bit protected mode -> long mode on the BSP's
 * GDT and page tables, loads the BSP's IDT (so a stray NMI is harmless),
 * increments ap_running and halts with interrupts off forever. */

#define AP_TRAMPOLINE_BASE 0x6000
#define T(sym) ((sym) - ap_trampoline_start + AP_TRAMPOLINE_BASE)

    .section .rodata.trampoline, "a"
    .balign 16
    .globl ap_trampoline_start
    .globl ap_trampoline_end
    .code16
ap_trampoline_start:
    cli
    cld
    xor %ax, %ax
    mov %ax, %ds
    lgdtl T(ap_gdt_ptr)
    mov %cr0, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl $0x18, $T(ap_pm32)

    .code32
ap_pm32:
    mov $0x10, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    mov %cr4, %eax
    or $0x20, %eax
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov $0xC0000080, %ecx
    rdmsr
    or $0x100, %eax
    wrmsr
    mov %cr0, %eax
    or $0x80000001, %eax
    mov %eax, %cr0
    ljmp $0x08, $T(ap_lm64)

    .code64
ap_lm64:
    lidt idt_ptr
    lock incl ap_running
1:  cli
    hlt
    jmp 1b

    .balign 8
ap_gdt_ptr:
    .word 31
    .long gdt
ap_trampoline_end:
