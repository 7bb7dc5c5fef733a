#!/usr/bin/env bash
# Install what the build, the tests and the lab need on a fresh Debian
# bookworm machine (root). Idempotent and quick when all is already there.
set -euo pipefail

# Everything comes from Debian's packages: the lab host's QEMU and firmware,
# busybox and fio for the images, the kernel source and its build tools, a
# TrueType font for the bench tool's chart labels, ccache for the guest
# kernels (the patched build reuses the baseline's objects), mmdebstrap for
# the Debian 13 root that today's QEMU runs from (ci/lab/debian-root).
# The guest kernels' build tools on other distributions: guest-patches/README.md.
pkgs=(qemu-system-x86 busybox-static cpio linux-source-6.1 linux-source-6.12 fio flex bison bc
	libelf-dev libssl-dev rsync kmod xz-utils build-essential python3
	fonts-dejavu-core ccache mmdebstrap)

# apt's lists are needed anyway: the lab picks the newest cloud kernel from them.
if [ -z "$(apt-cache pkgnames linux-image-6.1.0- 2>/dev/null | head -n 1)" ] || [ "${CI:-}" = true ]; then
	apt-get update -qq
fi
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "[install-deps] apt-get install ${missing[*]}" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The fuzz targets build with cargo-fuzz on the nightly toolchain the machine ships.
if [ -d "$(dirname "$0")/../fuzz" ] && ! command -v cargo-fuzz >/dev/null; then
	echo "[install-deps] cargo install cargo-fuzz" >&2
	cargo install -q --locked cargo-fuzz
fi
