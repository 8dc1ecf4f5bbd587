/* Entry points, descriptor tables, page tables and interrupt stubs of the
 * test guest.
 *
 *  _start       64-bit entry (the VMM's Linux 64-bit boot path, primary):
 *               long mode, CS=0x08, RSI = zero page, interrupts off.
 *  pvh_start32  32-bit PVH entry (XEN_ELFNOTE_PHYS32_ENTRY), for QEMU
 *               -M microvm: protected mode, paging off, EBX = hvm_start_info.
 *
 * Both load our own GDT and page tables (identity map of 0-4 GiB with 2 MiB
 * pages, built by the assembler so no boot time is spent on them: the VMM's
 * tables map only 1 GiB and the LAPIC, IOAPIC and virtio-mmio windows live
 * at 3-4 GiB), zero .bss and call kmain(boot_info, mode). */

#define BOOT_MODE_LINUX 0
#define BOOT_MODE_PVH 1
#define PTE_PRESENT_RW_HUGE 0x83
#define PTE_UNCACHED 0x18          /* PCD | PWT */

    .section .text.entry, "ax"
    .code64
    .globl _start
_start:
    cli
    cld
    mov %rsi, %r12                 /* zero page; r12 survives the bss clear */
    mov $BOOT_MODE_LINUX, %r13d
    jmp common64

    .code32
    .globl pvh_start32
pvh_start32:
    cli
    cld
    lgdt gdt_ptr
    mov $0x10, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    mov %cr4, %eax
    or $0x20, %eax                 /* PAE */
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov $0xC0000080, %ecx          /* EFER */
    rdmsr
    or $0x100, %eax                /* LME */
    wrmsr
    mov %cr0, %eax
    or $0x80000001, %eax           /* PG | PE */
    mov %eax, %cr0
    ljmp $0x08, $pvh_start64

    .code64
pvh_start64:
    mov %ebx, %r12d                /* hvm_start_info, zero-extended */
    mov $BOOT_MODE_PVH, %r13d

common64:
    lea boot_stack_top(%rip), %rsp
    lgdt gdt_ptr(%rip)
    pushq $0x08
    lea 1f(%rip), %rax
    pushq %rax
    lretq                          /* reload CS from our GDT */
1:  mov $0x10, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    xor %eax, %eax
    mov %eax, %fs
    mov %eax, %gs
    mov $boot_pml4, %rax
    mov %rax, %cr3
    lea __bss_start(%rip), %rdi
    lea __bss_end(%rip), %rcx
    sub %rdi, %rcx
    shr $3, %rcx
    xor %eax, %eax
    rep stosq
    mov %r12, %rdi
    mov %r13, %rsi
    call kmain
2:  cli
    hlt
    jmp 2b

/* ---- GDT: null, 64-bit code 0x08, data 0x10, 32-bit code 0x18 ---- */
    .section .data, "aw"
    .balign 16
    .globl gdt
gdt:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
    .quad 0x00cf9a000000ffff
gdt_end:
    .balign 16
    .globl gdt_ptr
gdt_ptr:
    .word gdt_end - gdt - 1
    .quad gdt

/* ---- Page tables: PML4 -> PDPT -> 4 PDs of 512 x 2 MiB = 0..4 GiB ---- */
    .section .data.pagetables, "aw"
    .balign 4096
    .globl boot_pml4
boot_pml4:
    .quad boot_pdpt + 3
    .fill 511, 8, 0
boot_pdpt:
    .quad boot_pd + 0x0000 + 3
    .quad boot_pd + 0x1000 + 3
    .quad boot_pd + 0x2000 + 3
    .quad boot_pd + 0x3000 + 3
    .fill 508, 8, 0
boot_pd:
    .set i, 0
    .rept 1536                     /* 0..3 GiB: RAM, cached */
    .quad (i << 21) | PTE_PRESENT_RW_HUGE
    .set i, i + 1
    .endr
    .rept 512                      /* 3..4 GiB: MMIO (virtio, IOAPIC, LAPIC) */
    .quad (i << 21) | PTE_PRESENT_RW_HUGE | PTE_UNCACHED
    .set i, i + 1
    .endr

/* ---- Boot stack (not zeroed: it is in use while .bss is cleared) ---- */
    .section .bss.large, "aw", @nobits
    .balign 16
boot_stack:
    .skip 32768
boot_stack_top:

/* ---- PVH ELF note: XEN_ELFNOTE_PHYS32_ENTRY (18) ---- */
    .section .note.Xen, "a", @note
    .balign 4
    .long 4                        /* namesz */
    .long 4                        /* descsz */
    .long 18                       /* type */
    .asciz "Xen"
    .long pvh_start32

/* ---- Interrupt stubs ---- */
    .section .text, "ax"
    .code64

/* Exceptions: push (vector, error) and report; never returns. */
.macro EXC_NOERR n
    .globl isr_exc_\n
isr_exc_\n:
    pushq $0
    pushq $\n
    jmp exc_common
.endm
.macro EXC_ERR n
    .globl isr_exc_\n
isr_exc_\n:
    pushq $\n
    jmp exc_common
.endm
EXC_NOERR 0
EXC_NOERR 1
EXC_NOERR 3
EXC_NOERR 4
EXC_NOERR 5
EXC_NOERR 6
EXC_NOERR 7
EXC_ERR 8
EXC_NOERR 9
EXC_ERR 10
EXC_ERR 11
EXC_ERR 12
EXC_ERR 13
EXC_ERR 14
EXC_NOERR 15
EXC_NOERR 16
EXC_ERR 17
EXC_NOERR 18
EXC_NOERR 19
EXC_NOERR 20
EXC_ERR 21
exc_common:
    mov %rsp, %rdi                 /* {vector, error, rip, cs, rflags, rsp, ss} */
    and $-16, %rsp
    call ExceptionHandler
3:  cli
    hlt
    jmp 3b

/* NMI and vectors nobody should raise: return without an EOI. */
    .globl isr_ignore
isr_ignore:
    iretq

/* 8259 master (vectors 0x20-0x27) and slave (0x28-0x2f): EOI and count. The
 * main loop looks at the devices after every wakeup, so the handler does
 * nothing else. */
    .globl isr_pic_master
isr_pic_master:
    push %rax
    mov $0x20, %al
    out %al, $0x20
    lock incq irq_count(%rip)
    pop %rax
    iretq

    .globl isr_pic_slave
isr_pic_slave:
    push %rax
    mov $0x20, %al
    out %al, $0xa0
    out %al, $0x20
    lock incq irq_count(%rip)
    pop %rax
    iretq

/* IOAPIC-routed vectors (0x30-0x4f): LAPIC EOI. */
    .globl isr_lapic
isr_lapic:
    push %rax
    mov $0xfee000b0, %rax
    movl $0, (%rax)
    lock incq irq_count(%rip)
    pop %rax
    iretq

    .section .bss, "aw", @nobits
    .balign 8
    .globl irq_count
irq_count:
    .quad 0
