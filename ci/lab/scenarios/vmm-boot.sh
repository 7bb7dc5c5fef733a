# Scenario: our VMM boots the guest (no devices) to its init, which reports
# and powers off; the VMM exits 0. With --on-reboot exit a guest that
# panics (panic=-1) or resets ends the VMM with 3 instead of booting again.
out=$(timeout "$(lab_arg guest_timeout 600)" vmm --kernel "/lab/guest/$(lab_arg kernel_stock baseline).bzImage" \
	--initrd /lab/guest/initramfs.cpio --memory 1024M --on-reboot exit \
	--cmdline "console=ttyS0 quiet panic=-1 lab.mode=boot" </dev/null 2>&1)
rc=$?
ok=false
printf '%s\n' "$out" | grep -q '"event":"boot"' && printf '%s\n' "$out" | grep -q 'LAB-GUEST-DONE@@ rc=0' && [ $rc -eq 0 ] && ok=true
lab_check vmm-boot "$ok" "VMM exit $rc; $(printf '%s\n' "$out" | grep -o 'event":"boot[^}]*' | head -n 1)"
