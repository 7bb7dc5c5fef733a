# Shared helpers for the lab build scripts (sourced, not run).
# shellcheck shell=bash

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$LAB_DIR/../.." && pwd)
# Everything built is cached outside the clone, keyed by a hash of its inputs.
LAB_CACHE=${VIOMMU_LAB_CACHE:-$HOME/.cache/viommu-lab}
export VIOMMU_LAB_CACHE=$LAB_CACHE

log() { echo "[lab:${LAB_STEP:-build}] $*" >&2; }
die() {
	echo "[lab:${LAB_STEP:-build}] error: $*" >&2
	exit 1
}

# hash_inputs FILE|TEXT...: a short key over file contents and literal strings.
hash_inputs() {
	local x
	for x in "$@"; do
		if [ -f "$x" ]; then
			echo "== file $(basename "$x")"
			cat "$x"
		else
			echo "== text $x"
		fi
	done | sha256sum | cut -c1-16
}

# pkg_version NAME: the installed Debian version of a package.
pkg_version() {
	dpkg-query -W -f='${Version}' "$1" 2>/dev/null || die "package $1 is not installed (run ci/install-deps.sh)"
}

# copy_with_libs ROOT BINARY...: copy binaries and every shared library they load into ROOT.
copy_with_libs() {
	local root=$1 bin lib
	shift
	for bin in "$@"; do
		mkdir -p "$root$(dirname "$bin")"
		cp -L "$bin" "$root$bin"
		ldd "$bin" | awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/.*ld-linux/ {print $1}' | while read -r lib; do
			[ -f "$root$lib" ] && continue
			mkdir -p "$root$(dirname "$lib")"
			cp -L "$lib" "$root$lib"
		done
	done
}

# make_cpio DIR OUT: pack DIR as an uncompressed newc archive (uncompressed
# unpacks far faster than gzip under emulation, and memory is plentiful).
make_cpio() {
	(cd "$1" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0) >"$2.tmp"
	mv "$2.tmp" "$2"
}

# base_rootfs DIR: busybox with its applets and a console node.
base_rootfs() {
	local root=$1
	mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,etc,root,usr/bin,usr/sbin,lib64,lib/x86_64-linux-gnu}
	cp /bin/busybox "$root/bin/busybox"
	for a in $(/bin/busybox --list); do
		[ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
	done
	mknod -m 600 "$root/dev/console" c 5 1
	mknod -m 666 "$root/dev/null" c 1 3
}
