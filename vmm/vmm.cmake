# The monitor: VM assembly, vCPU threads and the kubicle-vmm binary.
add_library(kubicle_vmm_monitor vm.cc vm_build.cc vm_devices.cc vm_disks.cc vm_snapshot.cc vm_pool.cc
  vm_fork.cc vm_workspace.cc vcpu_runner.cc fast_exit.cc memory_reservation.cc)
target_compile_options(kubicle_vmm_monitor PRIVATE ${KUBICLE_HOST_WARNINGS})
target_link_libraries(kubicle_vmm_monitor PUBLIC
  kubicle_snapshot kubicle_vmm_control kubicle_vmm_arch kubicle_vmm_kvm kubicle_vmm_legacy kubicle_vmm_virtio
  kubicle_vmm_core kubicle_common)

# The memory reservation of restore and the warm pool (no KVM VM needed).
kubicle_test(vmm_reservation_test unit memory_reservation_test.cc)
target_link_libraries(vmm_reservation_test PRIVATE kubicle_vmm_monitor)

# kvm tests of vCPU/VM state capture and apply, through the snapshot
# directory and the memory reservation, on a tiny hand-made guest.
kubicle_test(vmm_capture_kvm_test kvm state_capture_kvm_test.cc)
target_link_libraries(vmm_capture_kvm_test PRIVATE kubicle_vmm_monitor)

add_executable(kubicle-vmm main.cc)
target_compile_options(kubicle-vmm PRIVATE ${KUBICLE_HOST_WARNINGS})
target_link_libraries(kubicle-vmm PRIVATE kubicle_vmm_monitor)

# Runs kubicle-vmm processes for kvm tests and benchmarks.
add_library(kubicle_vmm_testing testing/vm_process.cc testing/test_netns.cc)
target_compile_options(kubicle_vmm_testing PRIVATE ${KUBICLE_HOST_WARNINGS})
target_link_libraries(kubicle_vmm_testing PUBLIC kubicle_vmm_protocol kubicle_agent_client kubicle_common
                      PRIVATE kubicle_vmm_launch)

# kvm tests: real kubicle-vmm processes booting the test guest.
kubicle_test(vmm_process_kvm_test kvm vmm_process_kvm_test.cc)
target_link_libraries(vmm_process_kvm_test PRIVATE kubicle_vmm_testing kubicle_testguest_elf)
target_compile_definitions(vmm_process_kvm_test PRIVATE KUBICLE_VMM_BIN="$<TARGET_FILE:kubicle-vmm>")
add_dependencies(vmm_process_kvm_test kubicle-vmm)

# kvm tests of snapshot and restore (vm_snapshot.cc) through real processes.
kubicle_test(vm_snapshot_kvm_test kvm vm_snapshot_kvm_test.cc)
target_link_libraries(vm_snapshot_kvm_test PRIVATE kubicle_vmm_testing kubicle_snapshot kubicle_testguest_elf)
target_compile_definitions(vm_snapshot_kvm_test PRIVATE KUBICLE_VMM_BIN="$<TARGET_FILE:kubicle-vmm>")
add_dependencies(vm_snapshot_kvm_test kubicle-vmm)

# kvm tests of fork (vm_fork.cc) through real processes.
kubicle_test(vm_fork_kvm_test kvm vm_fork_kvm_test.cc)
target_link_libraries(vm_fork_kvm_test PRIVATE kubicle_vmm_testing kubicle_testguest_elf)
target_compile_definitions(vm_fork_kvm_test PRIVATE KUBICLE_VMM_BIN="$<TARGET_FILE:kubicle-vmm>")
add_dependencies(vm_fork_kvm_test kubicle-vmm)

# kvm tests of copy-on-write disks in snapshot, restore and fork (vm_disks.cc).
kubicle_test(vm_disk_kvm_test kvm vm_disk_kvm_test.cc)
target_link_libraries(vm_disk_kvm_test PRIVATE kubicle_vmm_testing kubicle_snapshot kubicle_vmm_virtio
  kubicle_testguest_elf)
target_compile_definitions(vm_disk_kvm_test PRIVATE KUBICLE_VMM_BIN="$<TARGET_FILE:kubicle-vmm>")
add_dependencies(vm_disk_kvm_test kubicle-vmm)

# kvm tests of virtio-net end to end: the test guest answering pings through
# a TAP in a test namespace, after boot, fork and pool restore.
kubicle_test(vm_net_kvm_test kvm vm_net_kvm_test.cc)
target_link_libraries(vm_net_kvm_test PRIVATE kubicle_vmm_testing kubicle_testguest_elf)
target_compile_definitions(vm_net_kvm_test PRIVATE KUBICLE_VMM_BIN="$<TARGET_FILE:kubicle-vmm>")
add_dependencies(vm_net_kvm_test kubicle-vmm)
