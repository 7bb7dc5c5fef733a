#!/usr/bin/env bash
# Tests of build-kernel.sh that build no kernel (a few seconds; ci/test.sh's
# "lab scripts" step): its arguments, the sources it takes (trees, tarballs,
# Debian's package) and refuses, the kernel version and cache key it derives,
# the build tools it asks for on each distribution family, and the message
# of a patch that does not apply. Fake kernel trees stand in for real ones;
# compilers are stubs on a PATH of our own, so the host's tools don't matter.
#
#   guest-patches/test-build-kernel.sh [-v]    -v: show each command's stderr
# ok never fails: A && ok || bad is an if-then-else here.
# shellcheck disable=SC2015
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
verbose=0
[ "${1:-}" = -v ] && verbose=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export VIOMMU_LAB_CACHE=$tmp/cache NO_CCACHE=1
unset LINUX_SRC LINUX_SRC_6_1 LINUX_SRC_6_12 LINUX_SRC_7_2 LINUX_SRC_7_3 LINUX_SOURCE_DEB JOBS
export VIOMMU_OS_RELEASE=$tmp/os-release.debian

pass=0 fail=0
ok() {
	pass=$((pass + 1))
	[ $verbose = 0 ] || echo "ok: $1" >&2
}
bad() {
	fail=$((fail + 1))
	echo "FAIL: $1" >&2
	shift
	local l
	for l in "$@"; do echo "    $l" >&2; done
}

# ---- a PATH with the real basics and stubs for the build tools

bin=$tmp/bin
mkdir -p "$bin"
for t in bash env dirname basename cat sed grep awk tr sort head tail cut sha256sum find realpath \
	mkdir rm mv touch tar xz gzip ls nproc cp chmod wc rsync patch flock xargs; do
	p=$(command -v "$t") || {
		echo "test-build-kernel.sh: $t is needed to run these tests" >&2
		exit 1
	}
	ln -s "$p" "$bin/$t"
done
stub() { printf '#!/bin/sh\n%s\n' "${2:-exit 0}" >"$bin/$1" && chmod +x "$bin/$1"; }
for t in gcc ld make flex bison bc perl cmp; do stub "$t"; done
# Debian's package database: the version in $FAKE_DEB_VERSION, else none.
# shellcheck disable=SC2016
stub dpkg-query '[ -n "$FAKE_DEB_VERSION" ] && printf %s "$FAKE_DEB_VERSION" || exit 1'

# PATH without some tools: nobin TOOL... prints the directory.
nobin() {
	local d t
	d=$(mktemp -d "$tmp/bin.XXXX")
	cp -P "$bin"/* "$d/"
	for t in "$@"; do rm -f "$d/$t"; done
	echo "$d"
}

for os in 'debian:ID=debian' 'ubuntu:ID=ubuntu
ID_LIKE=debian' 'fedora:ID=fedora' 'rocky:ID="rocky"
ID_LIKE="rhel centos fedora"' 'opensuse:ID="opensuse-leap"
ID_LIKE="suse opensuse"' 'arch:ID=arch' 'other:ID=plan9'; do
	printf 'NAME=x\n%s\n' "${os#*:}" >"$tmp/os-release.${os%%:*}"
done

# run [VAR=VALUE...] ARGS...: build-kernel.sh ARGS with the stub PATH (or
# $PATH_OVERRIDE); sets rc, out (stdout), err (stderr), lines (stderr's).
run() {
	local envs=()
	while [ $# -gt 0 ] && [[ $1 == [A-Z]*=* ]]; do envs+=("$1") && shift; done
	set +e
	out=$(env PATH="${PATH_OVERRIDE:-$bin}" "${envs[@]}" bash "$top/build-kernel.sh" "$@" 2>"$tmp/err")
	rc=$?
	set -e
	err=$(cat "$tmp/err")
	lines=$(grep -c '' "$tmp/err" || true)
	[ $verbose = 0 ] || printf '  $ %s build-kernel.sh %s\n%s\n' "${envs[*]}" "$*" "$err" | sed 's/^/  /' >&2
}

# fails NAME PATTERN... -- ARGS: exit status 1, one line on stderr, holding
# every PATTERN (fixed strings).
fails() {
	local name=$1 pats=() p
	shift
	while [ "$1" != -- ]; do pats+=("$1") && shift; done
	shift
	run "$@"
	if [ "$rc" = 0 ] || [ "$lines" != 1 ]; then
		bad "$name: expected one error line and a failure, got status $rc and $lines lines" "$err"
		return
	fi
	for p in "${pats[@]}"; do
		[[ $err == *"$p"* ]] || {
			bad "$name: the error lacks '$p'" "$err"
			return
		}
	done
	ok "$name"
}

# succeeds NAME PATTERN... -- ARGS: exit status 0, stdout holds every PATTERN.
succeeds() {
	local name=$1 pats=() p
	shift
	while [ "$1" != -- ]; do pats+=("$1") && shift; done
	shift
	run "$@"
	[ "$rc" = 0 ] || {
		bad "$name: status $rc" "$err"
		return
	}
	for p in "${pats[@]}"; do
		[[ $out == *"$p"* ]] || {
			bad "$name: the output lacks '$p'" "$out"
			return
		}
	done
	ok "$name"
}

# key ARGS: the cache key of a --dry-run.
key() {
	run "$@" --dry-run
	[ "$rc" = 0 ] || bad "key $*: status $rc" "$err"
	sed -n 's/^key: //p' <<<"$out"
}

# fake_tree DIR VERSION PATCHLEVEL SUBLEVEL [EXTRAVERSION]: a directory with
# a kernel's top Makefile and a file the series patches (not as it expects).
fake_tree() {
	mkdir -p "$1/drivers/iommu"
	printf '# SPDX-License-Identifier: GPL-2.0\nVERSION = %s\nPATCHLEVEL = %s\nSUBLEVEL = %s\nEXTRAVERSION = %s\nNAME = Fake\n' \
		"$2" "$3" "$4" "${5:-}" >"$1/Makefile"
	printf 'not the virtio-iommu driver\n' >"$1/drivers/iommu/virtio-iommu.c"
}

t612=$tmp/src/linux-6.12.5
fake_tree "$t612" 6 12 5
t61=$tmp/src/linux-6.1.90
fake_tree "$t61" 6 1 90
(cd "$tmp/src" && tar cJf linux-6.12.5.tar.xz linux-6.12.5 && tar czf linux-6.12.5.tar.gz linux-6.12.5)

# ---- arguments

run
[ "$rc" = 2 ] && [[ $err == usage:* ]] && ok "no version: usage" || bad "no version: status $rc" "$err"
fails "unknown variant" "unknown variant 'bogus'" -- 6.12 bogus
fails "unknown option" "unknown option '--bogus'" "--src SRC" -- 6.12 --bogus
fails "--src without a value" "--src needs a value" -- 6.12 patched --src
fails "two variants" "one variant at a time" -- 6.12 baseline patched
fails "no such series" "no series directory" -- 6.99 baseline
succeeds "--help" "--src" "LINUX_SRC_6_12" -- 6.12 --help

# ---- sources refused: one line naming the value and what is expected

expect="a kernel tree (directory), a kernel.org tarball (linux-6.12.N.tar.xz) or 'debian'"
fails "LINUX_SRC that does not exist" "LINUX_SRC=$tmp/nope: no such file or directory" "$expect" -- \
	LINUX_SRC="$tmp/nope" 6.12 patched
fails "--src that does not exist" "--src $tmp/nope: no such file" -- 6.12 --src "$tmp/nope"
fails "LINUX_SRC_6_12 that does not exist" "LINUX_SRC_6_12=$tmp/nope: no such file" -- \
	LINUX_SRC_6_12="$tmp/nope" 6.12
echo text >"$tmp/notes.txt"
fails "a file that is no tarball" "$tmp/notes.txt is a file but not a kernel tarball" "$expect" -- \
	LINUX_SRC="$tmp/notes.txt" 6.12
mkdir -p "$tmp/empty"
fails "a directory without a kernel" "LINUX_SRC=$tmp/empty is not a kernel source (no top-level Makefile" "$expect" -- \
	LINUX_SRC="$tmp/empty" 6.12
echo garbage >"$tmp/broken.tar.xz"
fails "a tarball tar cannot read" "LINUX_SRC=$tmp/broken.tar.xz as a tarball" -- LINUX_SRC="$tmp/broken.tar.xz" 6.12
(cd "$tmp" && tar cJf nokernel.tar.xz empty notes.txt)
fails "a tarball without a kernel" "LINUX_SRC=$tmp/nokernel.tar.xz is not a kernel source" -- \
	LINUX_SRC="$tmp/nokernel.tar.xz" 6.12
fails "a 6.1 tree for the 6.12 series" "is linux 6.1.90 (its Makefile)" "builds v6.12.y" \
	"build it with guest-patches/linux-6.1/build.sh" -- 6.12 --src "$t61" patched
fake_tree "$tmp/src/linux-6.8.3" 6 8 3
fails "a version with no series" "is linux 6.8.3" "builds v6.12.y" "(kernel.org linux-6.12.N.tar.xz); there is no series for 6.8 (series: 6.1 6.12 7.2 7.3)" -- \
	6.12 --src "$tmp/src/linux-6.8.3"
fails "a 6.12 tarball for the 6.1 series" "is linux 6.12.5" "builds v6.1.y" -- \
	LINUX_SRC="$tmp/src/linux-6.12.5.tar.xz" 6.1 patched

# ---- which source wins: --src, then LINUX_SRC_X_Y, then LINUX_SRC

succeeds "LINUX_SRC_6_12 before LINUX_SRC" "source: LINUX_SRC_6_12=$t612" -- \
	LINUX_SRC="$t61" LINUX_SRC_6_12="$t612" 6.12 --dry-run
succeeds "--src before the environment" "source: --src $t612" -- \
	LINUX_SRC="$t61" LINUX_SRC_6_12="$t61" 6.12 --src="$t612" --dry-run
succeeds "LINUX_SRC_6_12 not for 6.1" "source: LINUX_SRC=$t61" -- \
	LINUX_SRC="$t61" LINUX_SRC_6_12="$t612" 6.1 --dry-run

# ---- the version and the cache key

succeeds "a tree's version from its Makefile" "version: linux 6.12.5" "not built: $VIOMMU_LAB_CACHE/kernels/linux-6.12-patched-" -- \
	6.12 --src "$t612" patched --dry-run
succeeds "each series names its base" "series: v6.12.y, made against 6.12." -- 6.12 --src "$t612" patched --dry-run

# ---- on a distribution's config (--base-config)

printf 'CONFIG_MODULES=y\nCONFIG_VIRTIO_IOMMU=m\n' >"$tmp/config-distro"
fails "--base-config that is not a config" "--base-config $tmp/notes.txt: not a kernel config" -- \
	6.12 --src "$t612" --base-config "$tmp/notes.txt" patched
fails "--base-config for the lab host" "--base-config builds baseline or patched, not labhost" -- \
	6.12 --src "$t612" --base-config "$tmp/config-distro" labhost
fails "--base-config without a value" "--base-config needs a value" -- 6.12 patched --base-config
succeeds "--base-config builds apart" "not built: $VIOMMU_LAB_CACHE/kernels/linux-6.12-patched-distro-" -- \
	6.12 --src "$t612" --base-config "$tmp/config-distro" patched --dry-run
k1=$(key 6.12 --src "$t612" --base-config "$tmp/config-distro" patched)
printf 'CONFIG_MODULES=y\nCONFIG_VIRTIO_IOMMU=y\n' >"$tmp/config-distro"
k2=$(key 6.12 --src "$t612" --base-config "$tmp/config-distro" patched)
[ -n "$k1" ] && [ "$k1" != "$k2" ] && ok "the base config is in the key" || bad "the base config is not in the key: $k1 $k2"
succeeds "each series names its base (6.1)" "series: v6.1.y, made against 6.1." -- 6.1 --src "$t61" patched --dry-run
t72=$tmp/src/linux-7.2.3
fake_tree "$t72" 7 2 3
succeeds "each series names its base (7.2)" "series: v7.2.y, made against 7.2." -- 7.2 --src "$t72" patched --dry-run
fails "a 7.2 tree for the 6.12 series" "is linux 7.2.3 (its Makefile)" "builds v6.12.y" \
	"build it with guest-patches/linux-7.2/build.sh" -- 6.12 --src "$t72"
succeeds "LINUX_SRC_7_2 for 7.2" "source: LINUX_SRC_7_2=$t72" -- \
	LINUX_SRC="$t612" LINUX_SRC_7_2="$t72" 7.2 --dry-run
t73=$tmp/src/linux-7.3.1
fake_tree "$t73" 7 3 1
succeeds "each series names its base (7.3)" "series: v7.3.y, made against 7.3." -- 7.3 --src "$t73" patched --dry-run
succeeds "LINUX_SRC_7_3 for 7.3, not LINUX_SRC_7_2" "source: LINUX_SRC_7_3=$t73" -- \
	LINUX_SRC_7_2="$t72" LINUX_SRC_7_3="$t73" 7.3 --dry-run
fake_tree "$tmp/src/rc" 6 12 0 -rc3
succeeds "EXTRAVERSION" "version: linux 6.12.0-rc3" -- 6.12 --src "$tmp/src/rc" --dry-run
k1=$(key 6.12 --src "$t612" patched)
k2=$(key 6.12 --src "$t612" patched)
[ -n "$k1" ] && [ "$k1" = "$k2" ] && ok "a tree's key is stable" || bad "a tree's key changes: '$k1' '$k2'"
kb=$(key 6.12 --src "$t612" baseline)
[ "$kb" != "$k1" ] && ok "variants have their own keys" || bad "baseline and patched share key $k1"
cp -a "$t612" "$tmp/src/copy"
[ "$(key 6.12 --src "$tmp/src/copy" patched)" = "$k1" ] && ok "a copy with the same files and times has the same key" ||
	bad "a cp -a of the tree has another key"
echo "/* changed */" >>"$tmp/src/copy/drivers/iommu/virtio-iommu.c"
[ "$(key 6.12 --src "$tmp/src/copy" patched)" != "$k1" ] && ok "a changed tree has another key" ||
	bad "a changed file keeps key $k1"
fake_tree "$tmp/src/linux-6.12.6" 6 12 6
touch -r "$t612/Makefile" "$tmp/src/linux-6.12.6/Makefile"
[ "$(key 6.12 --src "$tmp/src/linux-6.12.6" patched)" != "$k1" ] && ok "another version has another key" ||
	bad "6.12.6 has the key of 6.12.5"

# A git tree: its commit and what is not committed, but not what .gitignore hides.
if git=$(command -v git); then
	ln -s "$git" "$bin/git"
	g=$tmp/src/git
	cp -a "$t612" "$g"
	printf '*.o\n' >"$g/.gitignore"
	git -C "$g" init -q && git -C "$g" add -A &&
		git -C "$g" -c user.name=t -c user.email=t@t commit -qm base
	kg=$(key 6.12 --src "$g" patched)
	[ "$(key 6.12 --src "$g" patched)" = "$kg" ] && [ "$kg" != "$k1" ] && ok "a git tree's key is stable" || bad "git tree key '$kg'"
	touch "$g/Makefile" && echo x >"$g/built.o"
	[ "$(key 6.12 --src "$g" patched)" = "$kg" ] && ok "a git tree's key ignores mtimes and ignored files" ||
		bad "a git tree's key changed with a touch or an ignored file"
	echo "/* changed */" >>"$g/drivers/iommu/virtio-iommu.c"
	kg2=$(key 6.12 --src "$g" patched)
	[ "$kg2" != "$kg" ] && ok "a git tree's uncommitted change changes its key" || bad "an uncommitted change keeps key $kg"
	echo new >"$g/drivers/iommu/new.c"
	[ "$(key 6.12 --src "$g" patched)" != "$kg2" ] && ok "a git tree's untracked file changes its key" ||
		bad "an untracked file keeps key $kg2"
	rm "$bin/git"
fi

succeeds "a tarball's version" "version: linux 6.12.5" "source: LINUX_SRC=$tmp/src/linux-6.12.5.tar.xz (sha256 " -- \
	LINUX_SRC="$tmp/src/linux-6.12.5.tar.xz" 6.12 patched --dry-run
succeeds "a .tar.gz" "version: linux 6.12.5" -- LINUX_SRC="$tmp/src/linux-6.12.5.tar.gz" 6.12 --dry-run
kt=$(key 6.12 --src "$tmp/src/linux-6.12.5.tar.xz" patched)
[ -n "$kt" ] && [ "$kt" = "$(key 6.12 --src "$tmp/src/linux-6.12.5.tar.xz" patched)" ] && [ "$kt" != "$k1" ] &&
	ok "a tarball's key is stable and its own" || bad "tarball key '$kt' (tree's $k1)"
cp "$tmp/src/linux-6.12.5.tar.xz" "$tmp/src/renamed.tar.xz"
[ "$(key 6.12 --src "$tmp/src/renamed.tar.xz" patched)" = "$kt" ] && ok "a tarball's key follows its content, not its name" ||
	bad "a renamed tarball has another key"

# Debian's package (the default), faked: its tarball and dpkg-query's answer.
deb=$tmp/usr-src/linux-source-6.12.tar.xz
mkdir -p "$tmp/usr-src/linux-source-6.12"
fake_tree "$tmp/usr-src/linux-source-6.12" 6 12 117
(cd "$tmp/usr-src" && tar cJf linux-source-6.12.tar.xz linux-source-6.12)
succeeds "Debian's package by default" "source: Debian's linux-source-6.12 6.12.117-1~deb12u1" "version: linux 6.12.117" -- \
	LINUX_SOURCE_DEB="$deb" FAKE_DEB_VERSION=6.12.117-1~deb12u1 6.12 patched --dry-run
succeeds "LINUX_SRC=debian" "source: Debian's linux-source-6.12 6.12.117-1~deb12u1" -- \
	LINUX_SOURCE_DEB="$deb" FAKE_DEB_VERSION=6.12.117-1~deb12u1 LINUX_SRC=debian 6.12 --dry-run
kd1=$(key LINUX_SOURCE_DEB="$deb" FAKE_DEB_VERSION=6.12.117-1~deb12u1 6.12 patched)
kd2=$(key LINUX_SOURCE_DEB="$deb" FAKE_DEB_VERSION=6.12.117-1~deb12u2 6.12 patched)
[ -n "$kd1" ] && [ "$kd1" != "$kd2" ] && [ "$kd1" != "$kt" ] && ok "Debian's key follows the package version" ||
	bad "Debian keys '$kd1' '$kd2'"
succeeds "Debian's tarball without its package: as a tarball" "no linux-source-6.12 package installed" "version: linux 6.12.117" -- \
	LINUX_SOURCE_DEB="$deb" 6.12 --dry-run
fails "no Debian package on Debian" "$tmp/nope.tar.xz missing: apt-get install linux-source-6.12" "LINUX_SRC=" -- \
	LINUX_SOURCE_DEB="$tmp/nope.tar.xz" 6.12 patched
fails "no Debian package on Fedora" "Debian's linux-source-6.12 (the default source" "LINUX_SRC=/path/to/linux-6.12.N.tar.xz" \
	"https://cdn.kernel.org/pub/linux/kernel/v6.x/" -- \
	VIOMMU_OS_RELEASE="$tmp/os-release.fedora" LINUX_SOURCE_DEB="$tmp/nope.tar.xz" 6.12 patched
fails "no Debian package on Ubuntu" "is not here: set LINUX_SRC=" -- \
	VIOMMU_OS_RELEASE="$tmp/os-release.ubuntu" LINUX_SOURCE_DEB="$tmp/nope.tar.xz" 6.12

# Debian's package from another suite (7.2: trixie-backports), which
# fetch-debian-source.sh puts in the cache: taken when /usr/src has none.
fetched=$VIOMMU_LAB_CACHE/debian/linux-source-7.2
mkdir -p "$tmp/usr-src/linux-source-7.2" "$fetched"
fake_tree "$tmp/usr-src/linux-source-7.2" 7 2 12
(cd "$tmp/usr-src" && tar cJf "$fetched/linux-source-7.2.tar.xz" linux-source-7.2)
fails "7.2 without the fetched package" "$tmp/nope.tar.xz missing: guest-patches/fetch-debian-source.sh 7.2 (fetches linux-source-7.2 from trixie-backports" -- \
	LINUX_SOURCE_DEB="$tmp/nope.tar.xz" 7.2 patched
echo 7.2.12-1~bpo13+1 >"$fetched/version"
succeeds "Debian's package fetched from another suite" "source: Debian's linux-source-7.2 7.2.12-1~bpo13+1" "version: linux 7.2.12" -- \
	LINUX_SOURCE_DEB="$tmp/nope.tar.xz" 7.2 patched --dry-run
kf1=$(key LINUX_SOURCE_DEB="$tmp/nope.tar.xz" 7.2 patched)
echo 7.2.12-1~bpo13+2 >"$fetched/version"
kf2=$(key LINUX_SOURCE_DEB="$tmp/nope.tar.xz" 7.2 patched)
[ -n "$kf1" ] && [ "$kf1" != "$kf2" ] && ok "a fetched package's key follows its version" ||
	bad "fetched package keys '$kf1' '$kf2'"
fails "no fetched package for 6.12: apt-get install" "$tmp/nope.tar.xz missing: apt-get install linux-source-6.12," -- \
	LINUX_SOURCE_DEB="$tmp/nope.tar.xz" 6.12
# fetch-debian-source.sh: a series without a suite of its own needs no
# fetch (no apt run, no network); a bad version is refused.
if out=$(env PATH="$bin" VIOMMU_LAB_CACHE="$tmp/cache" bash "$top/fetch-debian-source.sh" 6.12 2>&1) &&
	[[ $out == *"apt-get install linux-source-6.12"* ]]; then ok "fetch-debian-source.sh 6.12: the machine's own suites"; else bad "fetch-debian-source.sh 6.12" "$out"; fi
if ! out=$(env PATH="$bin" bash "$top/fetch-debian-source.sh" 6.8 2>&1) && [[ $out == *"no series directory"* ]]; then
	ok "fetch-debian-source.sh: no series"
else bad "fetch-debian-source.sh 6.8" "$out"; fi
if ! out=$(env PATH="$bin" bash "$top/fetch-debian-source.sh" 2>&1) && [[ $out == *"usage:"* ]]; then
	ok "fetch-debian-source.sh: usage"
else bad "fetch-debian-source.sh without a version" "$out"; fi

# ---- build tools, named with this distribution's install command

PATH_OVERRIDE=$(nobin gcc flex bison)
for c in "debian:apt-get install gcc flex bison" "ubuntu:apt-get install gcc flex bison" \
	"fedora:dnf install gcc flex bison" "rocky:dnf install gcc flex bison" \
	"opensuse:zypper install gcc flex bison" "arch:pacman -S --needed gcc flex bison" \
	"other:Debian/Ubuntu: apt-get install gcc flex bison; Fedora/RHEL: dnf install gcc flex bison; openSUSE: zypper install gcc flex bison; Arch: pacman -S --needed gcc flex bison"; do
	fails "missing tools on ${c%%:*}" "missing build tools: gcc flex bison; " "${c#*:}" -- \
		VIOMMU_OS_RELEASE="$tmp/os-release.${c%%:*}" 6.12 --src "$t612" patched
done
succeeds "checkpatch needs no compiler" "version: linux 6.12.5" -- 6.12 --src "$t612" checkpatch --dry-run
PATH_OVERRIDE=$(nobin perl)
fails "checkpatch needs perl" "missing build tools: perl; apt-get install perl" -- 6.12 --src "$t612" checkpatch
# checkpatch from a tarball extracts only what checkpatch.pl reads (the
# stub perl runs the stub script and exits 0: every patch "clean").
PATH_OVERRIDE=
t6126=$tmp/src/linux-6.12.6
fake_tree "$t6126" 6 12 6
mkdir -p "$t6126/scripts" "$t6126/include/linux" "$t6126/Documentation/dev-tools"
printf '#!/usr/bin/env perl\n' >"$t6126/scripts/checkpatch.pl"
chmod +x "$t6126/scripts/checkpatch.pl"
for f in include/linux/io.h Documentation/dev-tools/checkpatch.rst MAINTAINERS COPYING CREDITS Kbuild README; do
	echo x >"$t6126/$f"
done
(cd "$tmp/src" && tar cJf linux-6.12.6.tar.xz linux-6.12.6)
succeeds "checkpatch from a tarball" -- 6.12 --src "$tmp/src/linux-6.12.6.tar.xz" checkpatch
cpt=$(ls -d "$VIOMMU_LAB_CACHE"/src/linux-6.12.6-*.checkpatch 2>/dev/null | head -n 1)
[ -n "$cpt" ] && [ -x "$cpt/scripts/checkpatch.pl" ] && [ -f "$cpt/include/linux/io.h" ] && [ -d "$cpt/arch" ] &&
	[ ! -e "$cpt/drivers/iommu/virtio-iommu.c" ] && [[ $err == *"checkpatch --strict clean: 0001-"* ]] &&
	ok "checkpatch's tree holds what it reads, not the sources" || bad "checkpatch's tree from a tarball" "$err" "$(ls -R "$cpt" 2>&1 | head)"
rm "$t6126/scripts/checkpatch.pl"
(cd "$tmp/src" && tar cJf linux-6.12.6-nocp.tar.xz linux-6.12.6)
run 6.12 --src "$tmp/src/linux-6.12.6-nocp.tar.xz" checkpatch
[ "$rc" = 1 ] && [[ $(tail -n 1 <<<"$err") == *"linux-6.12.6-nocp.tar.xz has no scripts/checkpatch.pl: expected a kernel tree"* ]] &&
	ok "checkpatch from a tarball without checkpatch.pl" || bad "checkpatch from a tarball without checkpatch.pl: status $rc" "$err"
PATH_OVERRIDE=$(nobin xz ld cmp flock awk)
for c in "debian:xz ld awk cmp flock; apt-get install xz-utils binutils gawk diffutils util-linux" \
	"fedora:dnf install xz binutils gawk diffutils util-linux"; do
	fails "package names on ${c%%:*}" "${c#*:}" -- \
		VIOMMU_OS_RELEASE="$tmp/os-release.${c%%:*}" LINUX_SRC="$tmp/src/linux-6.12.5.tar.xz" 6.12
done
# A compiler without libelf's headers.
stub gcc 'if grep -q gelf.h; then echo "gelf.h: No such file" >&2; exit 1; fi'
PATH_OVERRIDE=$(nobin)
for c in "debian:apt-get install libelf-dev" "fedora:dnf install elfutils-libelf-devel" \
	"opensuse:zypper install libelf-devel" "arch:pacman -S --needed libelf"; do
	fails "libelf headers on ${c%%:*}" "missing build tools: libelf (gelf.h); ${c#*:}" -- \
		VIOMMU_OS_RELEASE="$tmp/os-release.${c%%:*}" 6.12 --src "$t612" baseline
done
stub gcc
unset PATH_OVERRIDE

# ---- a patch that does not apply: the version found and the one wanted

# Leftovers of a build in the tree must not reach our copy.
echo CONFIG_X=y >"$t612/.config"
echo obj >"$t612/drivers/iommu/virtio-iommu.o"
run 6.12 --src "$t612" patched
last=$(tail -n 1 <<<"$err")
if [ "$rc" != 0 ]; then
	want="0001-iommu-virtio-Count-requests-per-type-in-debugfs.patch does not apply to linux 6.12.5 from --src $t612: the series wants v6.12.y, made against 6.12."
	[[ $last == *"$want"*"; found 6.12.5 (see guest-patches/linux-6.12/README.md)" ]] && ok "a patch that does not apply" ||
		bad "a patch that does not apply: the error is not as expected" "$last"
	[[ $err == *"note: the series was made against 6.12."*", this is 6.12.5"* ]] && ok "the base is named before patching" ||
		bad "no note on the base" "$err"
else
	bad "the series applied to a fake tree" "$err"
fi
copy=$VIOMMU_LAB_CACHE/work/linux-6.12-patched/src
[ -f "$copy/Makefile" ] && [ ! -e "$copy/.config" ] && [ ! -e "$copy/drivers/iommu/virtio-iommu.o" ] &&
	ok "the tree's build leftovers stay out of the copy" || bad "the copy of the tree has .config or .o files"
[ -z "$(find "$t612" -name '*.rej' -o -name '*.orig')" ] && [ "$(cat "$t612/drivers/iommu/virtio-iommu.c")" = "not the virtio-iommu driver" ] &&
	ok "the tree given is not modified" || bad "the tree given was modified"
[ ! -d "$VIOMMU_LAB_CACHE/kernels" ] || [ -z "$(ls "$VIOMMU_LAB_CACHE/kernels")" ] && ok "nothing cached after a failure" ||
	bad "a kernel was cached after a failure"

echo "test-build-kernel.sh: $pass passed, $fail failed" >&2
[ $fail = 0 ]
