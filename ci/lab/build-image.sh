#!/usr/bin/env bash
# Build everything the lab boots, cached under $VIOMMU_LAB_CACHE by a hash of
# the inputs; prints shell assignments for the lab runner:
#
#   HOST_KERNEL=...   the lab host's (L2) kernel: Debian's 6.1 cloud kernel,
#                     or with --host-kernel labhost-6.12 (or -6.1) the lab's
#                     own build (virtio-iommu support, for an outer
#                     virtio-iommu; 6.12 also iommufd and VFIO cdevs)
#   HOST_INITRD=...   its initramfs: cached base + this run's overlay
#
#   build-image.sh [--guest-kernels baseline,patched] [--host-kernel debian|labhost-6.1|labhost-6.12]
#                  [--vmm-qemu WRAPPER] [--userland WRAPPER] [--distro DIR] [--bin PATH]...
#
# --vmm-qemu puts the QEMU of a Debian 13 root (ci/lab/debian-root) into the
# lab host as /lab/qemu/qemu-system-x86_64, the VMM under test beside ours.
#
# --userland puts a whole Debian 13 root (ci/lab/debian-root --with
# fio,busybox-static) into the lab host as /lab/debian13, for a scenario
# to chroot into (scenarios/debian13-userland.sh): its fio, busybox, ldd
# and QEMU, without what no program there needs at run time (docs, man
# pages, locales, Python, the other QEMU system emulators).
#
# --distro puts the kernel and initramfs of a Debian 13 VM's drive
# (ci/lab/debian-vm's directory: vmlinuz, initrd.img and RELEASE, the files
# of its root's /boot, and initrd-stock.img, Debian's own initramfs without
# virtio_iommu) into the lab host's /lab/distro, for our VMM to boot
# with the root on the NVMe (scenarios/distro-vm.sh): the lab host cannot
# read them from the NVMe, which is bound to vfio-pci. Beside them, Debian
# 12's cloud kernel (the lab host's own behind VT-d) as
# debian12-cloud.vmlinuz: a kernel without the virtio-iommu driver.
#
# --bin copies a program (with its shared libraries) into the lab host's
# /lab/bin, e.g. our VMM. The layers, from slowest to fastest changing:
#   host base   busybox, KVM/VFIO modules, stock QEMU and its firmware
#   guest base  busybox, fio and its libraries
#   layers      --vmm-qemu's QEMU, --userland's Debian 13 root (cached per root)
#   overlay     the inits (host-init; the guest's is tools/viommu-bench/guest/init,
#               with its attacker viommu-hostile, hostile.c beside it),
#               scenarios, guest kernels, --bin programs (per run)
set -euo pipefail
LAB_STEP=image
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

guest_kernels=baseline
host_kernel_kind=debian
bins=()
while [ $# -gt 0 ]; do
	case "$1" in
	--guest-kernels) guest_kernels=$2 && shift 2 ;;
	--bin) bins+=("$2") && shift 2 ;;
	--host-kernel) host_kernel_kind=$2 && shift 2 ;;
	--vmm-qemu) vmm_qemu=$2 && shift 2 ;;
	--userland) userland=$2 && shift 2 ;;
	--distro) distro=$2 && shift 2 ;;
	*) die "unknown argument '$1' (see the header of $0)" ;;
	esac
done
for b in "${bins[@]}"; do [ -x "$b" ] || die "--bin $b: not an executable file"; done
mkdir -p "$LAB_CACHE"

# ---- lab host kernel: Debian's 6.1 cloud kernel, unpacked once per version.
cloud_pkg=$(apt-cache pkgnames linux-image-6.1.0- | grep -E '^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$' | sort -V | tail -n 1)
[ -n "$cloud_pkg" ] || die "no linux-image-6.1.0-*-cloud-amd64-unsigned in apt's lists (run apt-get update)"
cloud_ver=$(apt-cache show "$cloud_pkg" | awk '/^Version:/ {print $2; exit}')
hostk="$LAB_CACHE/host-kernel/$cloud_pkg-$cloud_ver"
if [ ! -f "$hostk/.done" ]; then
	log "fetching $cloud_pkg $cloud_ver"
	rm -rf "$hostk" && mkdir -p "$hostk/deb"
	# apt fetches as user _apt where it can write: let it (else a warning).
	chown _apt "$hostk/deb" 2>/dev/null || true
	(cd "$hostk/deb" && apt-get download -q "$cloud_pkg=$cloud_ver" >/dev/null)
	dpkg-deb -x "$hostk"/deb/*.deb "$hostk/root"
	rm -rf "$hostk/deb"
	touch "$hostk/.done"
fi
host_kernel=$(ls "$hostk"/root/boot/vmlinuz-*)
case "$host_kernel_kind" in
debian) ;;
# KVM and VFIO built in; the base image's Debian modules go unused.
labhost | labhost-6.1) host_kernel=$("$REPO_DIR/guest-patches/linux-6.1/build.sh" labhost) ;;
labhost-6.12) host_kernel=$("$REPO_DIR/guest-patches/linux-6.12/build.sh" labhost) ;;
*) die "--host-kernel $host_kernel_kind: expected debian, labhost-6.1 or labhost-6.12" ;;
esac
moddir=$(ls -d "$hostk"/root/lib/modules/*)

# modules_in_order NAME...: the .ko paths of NAMEs, dependencies first.
modules_in_order() {
	local m f dep
	for m in "$@"; do
		f=$(find "$moddir/kernel" -name "$m.ko" -o -name "${m//_/-}.ko" | head -n 1)
		[ -n "$f" ] || die "module $m not in $cloud_pkg"
		for dep in $(modinfo -F depends "$f" | tr ',' ' '); do
			modules_in_order "$dep"
		done
		echo "$f"
	done
}

# ---- host base: busybox, modules, QEMU.
qemu_ver=$(pkg_version qemu-system-x86)
host_key=$(hash_inputs "$LAB_DIR/lib.sh" "$0" "$cloud_pkg $cloud_ver" "qemu $qemu_ver" "busybox $(pkg_version busybox-static)")
host_base="$LAB_CACHE/images/host-base-$host_key.cpio"
if [ ! -f "$host_base" ]; then
	log "building the lab host base image (QEMU $qemu_ver, $cloud_pkg)"
	root=$(mktemp -d "$LAB_CACHE/tmp.XXXXXX")
	base_rootfs "$root"
	mkdir -p "$root/lab/modules"
	modules_in_order kvm_amd vfio_pci vfio_iommu_type1 | awk '!seen[$0]++' | while read -r f; do
		cp "$f" "$root/lab/modules/"
		basename "$f" >>"$root/lab/modules/order"
	done
	copy_with_libs "$root" /usr/bin/qemu-system-x86_64
	mkdir -p "$root/usr/share"
	cp -a /usr/share/qemu /usr/share/seabios "$root/usr/share/"
	mkdir -p "$LAB_CACHE/images"
	make_cpio "$root" "$host_base"
	rm -rf "$root"
fi

# ---- guest base: busybox and fio.
guest_key=$(hash_inputs "$LAB_DIR/lib.sh" "$0" "fio $(pkg_version fio)" "busybox $(pkg_version busybox-static)")
guest_base="$LAB_CACHE/images/guest-base-$guest_key.cpio"
if [ ! -f "$guest_base" ]; then
	log "building the guest base image (fio $(pkg_version fio))"
	root=$(mktemp -d "$LAB_CACHE/tmp.XXXXXX")
	base_rootfs "$root"
	copy_with_libs "$root" /usr/bin/fio
	mkdir -p "$LAB_CACHE/images"
	make_cpio "$root" "$guest_base"
	rm -rf "$root"
fi

# ---- QEMU layer (--vmm-qemu WRAPPER, a wrapper ci/lab/debian-root printed):
# that root's QEMU as the lab host's VMM under test, in /lab/qemu: the
# binary, the libraries the root's own loader resolves for it, its loader,
# the firmware, and a qemu-system-x86_64 script that runs it like the
# wrapper does. Cached per root (the root's name holds its hash).
qemu_layer=
if [ -n "${vmm_qemu:-}" ]; then
	qroot=$(cd "$(dirname "$vmm_qemu")/../root" && pwd) || die "--vmm-qemu $vmm_qemu: no root beside it (expected ci/lab/debian-root's wrapper)"
	qemu_layer="$LAB_CACHE/images/qemu-layer-$(basename "$(dirname "$qroot")")-$(hash_inputs "$0").cpio"
	if [ ! -f "$qemu_layer" ]; then
		log "building the QEMU layer from $(dirname "$qroot")"
		root=$(mktemp -d "$LAB_CACHE/tmp.XXXXXX")
		mkdir -p "$root/lab/qemu/lib" "$root/lab/qemu/share"
		ld="$qroot/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
		"$ld" --library-path "$qroot/usr/lib/x86_64-linux-gnu" --list "$qroot/usr/bin/qemu-system-x86_64" |
			awk '/=>/ && $3 ~ /^\// {print $3}' | while read -r lib; do cp -L "$lib" "$root/lab/qemu/lib/"; done
		cp -L "$ld" "$root/lab/qemu/lib/"
		cp -L "$qroot/usr/bin/qemu-system-x86_64" "$root/lab/qemu/qemu-system-x86_64.bin"
		cp -rL "$qroot/usr/share/qemu" "$qroot/usr/share/seabios" "$root/lab/qemu/share/"
		cat >"$root/lab/qemu/qemu-system-x86_64" <<'WRAP'
#!/bin/sh
# QEMU from a Debian 13 root (ci/lab/debian-root), with its own loader and libraries.
Q=/lab/qemu
exec $Q/lib/ld-linux-x86-64.so.2 --library-path $Q/lib $Q/qemu-system-x86_64.bin -L $Q/share/qemu -L $Q/share/seabios "$@"
WRAP
		chmod 755 "$root/lab/qemu/qemu-system-x86_64"
		"$root/lab/qemu/lib/ld-linux-x86-64.so.2" --library-path "$root/lab/qemu/lib" "$root/lab/qemu/qemu-system-x86_64.bin" --version >/dev/null ||
			die "the QEMU layer's QEMU does not run with its own libraries"
		make_cpio "$root" "$qemu_layer"
		rm -rf "$root"
	fi
fi

# ---- userland layer (--userland WRAPPER, a wrapper ci/lab/debian-root
# --with ... printed): that root as /lab/debian13, with the mount points
# the scenario binds the lab host's /proc, /sys, /dev, /tmp and /lab/bin,
# /lab/guest on. Cached per root (its name holds its hash).
userland_layer=
if [ -n "${userland:-}" ]; then
	uroot=$(cd "$(dirname "$userland")/../root" && pwd) || die "--userland $userland: no root beside it (expected ci/lab/debian-root's wrapper)"
	userland_layer="$LAB_CACHE/images/userland-$(basename "$(dirname "$uroot")")-$(hash_inputs "$0").cpio"
	if [ ! -f "$userland_layer" ]; then
		log "building the userland layer from $(dirname "$uroot")"
		root=$(mktemp -d "$LAB_CACHE/tmp.XXXXXX")
		u=$root/lab/debian13
		mkdir -p "$root/lab"
		cp -a "$uroot" "$u"
		rm -rf "$u"/usr/share/{doc,man,info,locale,lintian} "$u"/usr/lib/python3* "$u"/usr/bin/python3* \
			"$u"/usr/bin/qemu-system-i386 "$u"/usr/bin/qemu-system-x86_64-microvm "$u"/var/cache/* "$u"/var/lib/apt/lists/* "$u"/var/log/*
		mkdir -p "$u"/proc "$u"/sys "$u"/dev "$u"/tmp "$u"/lab/bin "$u"/lab/guest
		# What the bench tool will use there must run there.
		for p in fio busybox ldd qemu-system-x86_64; do
			[ -x "$u/usr/bin/$p" ] || die "the userland root has no /usr/bin/$p (ci/lab/debian-root --with fio,busybox-static)"
		done
		chroot "$u" /usr/bin/fio --version >/dev/null && chroot "$u" /usr/bin/ldd /usr/bin/fio >/dev/null &&
			chroot "$u" /usr/bin/qemu-system-x86_64 --version >/dev/null ||
			die "fio, ldd or QEMU does not run in the userland root ($u)"
		cp "$(dirname "$uroot")/PACKAGES" "$root/lab/debian13.packages" 2>/dev/null || true
		log "userland layer: $(du -sm "$u" | cut -f1) MB"
		make_cpio "$root" "$userland_layer"
		rm -rf "$root"
	fi
fi

# ---- overlay: small and rebuilt every run.
# Per run (LAB_RUN_DIR, from the runner), so concurrent runs do not collide.
run=${LAB_RUN_DIR:-$LAB_CACHE/run}
rm -rf "$run/guest-overlay" "$run/host-overlay" && mkdir -p "$run/guest-overlay" "$run/host-overlay/lab/guest" "$run/host-overlay/lab/bin"
# The guest runs the bench tool's own /init (its marker protocol), with
# the hostile guest's attacker beside it (lab.hostile=1; static, a second
# to build).
install -m 755 "$REPO_DIR/tools/viommu-bench/guest/init" "$run/guest-overlay/init"
mkdir -p "$run/guest-overlay/bin"
gcc -static -O2 -Wall -Wextra -Werror -o "$run/guest-overlay/bin/viommu-hostile" "$REPO_DIR/tools/viommu-bench/guest/hostile.c" ||
	die "building the guest's viommu-hostile (gcc -static; libc6-dev) failed"
make_cpio "$run/guest-overlay" "$run/guest-overlay.cpio"
cat "$guest_base" "$run/guest-overlay.cpio" >"$run/host-overlay/lab/guest/initramfs.cpio"
# Guest kernels are VARIANT or VARIANT-VERSION (baseline, patched-6.12,
# debpatched-6.12: the series on Debian's own config...);
# without a version, 6.1.
for v in $(echo "$guest_kernels" | tr ',' ' '); do
	# Debian 13's kernel package (ci/lab/debian-kernel): its vmlinuz and
	# config in /lab/guest/NAME/boot, and the modules the bench tool loads
	# in /lab/guest/NAME/usr/lib/modules/RELEASE, as in the package.
	if [ "$v" = debian-6.12 ]; then
		droot=$("$LAB_DIR/debian-kernel" 6.12) || die "fetching Debian's 6.12 kernel package failed"
		dk=$(ls "$droot"/boot/vmlinuz-* | head -n 1)
		rel=${dk##*/vmlinuz-}
		dmods=$droot/usr/lib/modules/$rel
		[ -d "$dmods/kernel" ] || dmods=$droot/lib/modules/$rel
		dst=$run/host-overlay/lab/guest/$v
		mkdir -p "$dst/boot" "$dst/usr/lib/modules/$rel"
		cp "$dk" "$droot/boot/config-$rel" "$dst/boot/"
		# The package has no modules.dep (depmod runs on installing it): the
		# bench tool reads each module's own depends=. These three
		# directories hold virtio_pci, virtio_iommu, nvme and their needs.
		for d in drivers/nvme drivers/iommu drivers/virtio; do
			[ ! -d "$dmods/kernel/$d" ] || { mkdir -p "$dst/usr/lib/modules/$rel/kernel/$d" && cp -r "$dmods/kernel/$d/." "$dst/usr/lib/modules/$rel/kernel/$d/"; }
		done
		continue
	fi
	case "$v" in
	*-*) variant=${v%-*} version=${v##*-} ;;
	*) variant=$v version=6.1 ;;
	esac
	[ -x "$REPO_DIR/guest-patches/linux-$version/build.sh" ] || { log "no guest kernel series for '$v' (guest-patches/linux-$version)"; exit 1; }
	base=()
	if [ "$variant" = debpatched ]; then
		# The series on Debian's own config (build.sh --base-config): the
		# config of the package ci/lab/debian-kernel fetches, as above.
		droot=$("$LAB_DIR/debian-kernel" "$version") || die "fetching Debian's $version kernel package (for its config) failed"
		base=(--base-config "$(ls "$droot"/boot/config-* | head -n 1)")
		variant=patched
	fi
	k=$("$REPO_DIR/guest-patches/linux-$version/build.sh" "${base[@]}" "$variant")
	cp "$k" "$run/host-overlay/lab/guest/$v.bzImage"
	# The bench tool names a hung guest's addresses with it.
	[ ! -f "$(dirname "$k")/System.map" ] || cp "$(dirname "$k")/System.map" "$run/host-overlay/lab/guest/$v.System.map"
done
if [ -n "${distro:-}" ]; then
	mkdir -p "$run/host-overlay/lab/distro"
	cp "$distro/vmlinuz" "$distro/initrd.img" "$distro/initrd-stock.img" "$distro/RELEASE" "$run/host-overlay/lab/distro/" ||
		die "--distro $distro: no vmlinuz, initrd.img, initrd-stock.img and RELEASE there (expected ci/lab/debian-vm's directory)"
	cp "$(ls "$hostk"/root/boot/vmlinuz-*)" "$run/host-overlay/lab/distro/debian12-cloud.vmlinuz"
fi
install -m 755 "$LAB_DIR/host-init" "$run/host-overlay/init"
cp "$LAB_DIR/host-lib.sh" "$run/host-overlay/lab/"
cp -r "$LAB_DIR/scenarios" "$run/host-overlay/lab/"
[ ${#bins[@]} -eq 0 ] || copy_with_libs "$run/host-overlay/stage" "${bins[@]}"
if [ -d "$run/host-overlay/stage" ]; then
	# Libraries go where the loader looks; the programs into /lab/bin.
	for b in "${bins[@]}"; do mv "$run/host-overlay/stage$b" "$run/host-overlay/lab/bin/"; done
	cp -a "$run/host-overlay/stage/." "$run/host-overlay/" && rm -rf "$run/host-overlay/stage"
fi
make_cpio "$run/host-overlay" "$run/host-overlay.cpio"
cat "$host_base" ${qemu_layer:+"$qemu_layer"} ${userland_layer:+"$userland_layer"} "$run/host-overlay.cpio" >"$run/host-initrd.cpio"
rm -rf "$run/host-overlay" "$run/guest-overlay"

echo "HOST_KERNEL=$host_kernel"
echo "HOST_INITRD=$run/host-initrd.cpio"
