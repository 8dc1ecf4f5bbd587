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
 * at 3-4 GiB), zero .bss and call kmain(boot_info, mode).
 *
 * Ring 3: on this machine CPL0 code is emulated (~2000x slower than CPL3
 * code, measured), so after setup kmain drops to CPL3 for good (EnterUser)
 * and runs the agent there with IF=0 and IOPL=3 (port I/O allowed). Pages are
 * user-accessible. Ring 0 only takes interrupts and halts: the user loop
 * executes the ud2 at user_halt; the #UD handler sees that address, does
 * sti; hlt; cli and resumes after it (INT n is not emulated here, exceptions
 * are). */

#define BOOT_MODE_LINUX 0
#define BOOT_MODE_PVH 1
#define PTE_PRESENT_RW_HUGE 0x87   /* P | RW | US | PS */
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

/* ---- GDT: null, 64-bit code 0x08, data 0x10, 32-bit code 0x18,
 *      user data 0x20 (0x23), user code 0x28 (0x2b), TSS 0x30 ---- */
    .section .data, "aw"
    .balign 16
    .globl gdt
gdt:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
    .quad 0x00cf9a000000ffff
    .quad 0x00cff2000000ffff
    .quad 0x00affa000000ffff
    .globl gdt_tss
gdt_tss:
    .quad 0                        /* filled by InitInterrupts */
    .quad 0
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
    .quad boot_pdpt + 7
    .fill 511, 8, 0
boot_pdpt:
    .quad boot_pd + 0x0000 + 7
    .quad boot_pd + 0x1000 + 7
    .quad boot_pd + 0x2000 + 7
    .quad boot_pd + 0x3000 + 7
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

/* ---- Stacks (not zeroed: the boot stack is in use while .bss is cleared).
 * ring0_stack is TSS.rsp0: interrupts and exceptions taken in ring 3. ---- */
    .section .bss.large, "aw", @nobits
    .balign 16
boot_stack:
    .skip 32768
boot_stack_top:
    .balign 16
user_stack:
    .skip 65536
    .globl user_stack_top
user_stack_top:
    .balign 16
ring0_stack:
    .skip 16384
    .globl ring0_stack_top
ring0_stack_top:

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
/* #UD: the ud2 at user_halt is the ring-3 loop asking to sleep. */
    .globl isr_exc_6
isr_exc_6:
    push %rax
    lea user_halt(%rip), %rax
    cmp %rax, 8(%rsp)              /* faulting RIP */
    pop %rax
    jne 1f
    sti
    hlt                            /* an interrupt (handled, EOI'd) wakes us */
    cli
    addq $2, (%rsp)                /* resume after the ud2 */
    iretq
1:  pushq $0
    pushq $6
    jmp exc_common
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

/* EnterUser(fn): one-way switch to ring 3 (IF=0, IOPL=3) running fn on
 * the user stack. */
    .globl EnterUser
EnterUser:
    pushq $0x23                    /* ss */
    lea user_stack_top(%rip), %rax
    pushq %rax                     /* rsp */
    pushq $0x0002                  /* rflags: IF=0, IOPL=0 (ports via the TSS bitmap) */
    pushq $0x2b                    /* cs */
    pushq %rdi                     /* rip */
    mov $0x23, %eax
    mov %eax, %ds
    mov %eax, %es
    iretq

/* Called from ring 3 with IF=0: sleeps until the next interrupt. */
    .globl user_halt
user_halt:
    ud2
    ret

    .section .bss, "aw", @nobits
    .balign 8
    .globl irq_count
irq_count:
    .quad 0
