#!/usr/bin/env bash
# Build the lab's guest (L3) kernel for the series in guest-patches/linux-X.Y/
# from a kernel source of your choice. Called by the series' own build.sh,
# which passes its version (guest-patches/README.md has the whole story):
#
#   linux-X.Y/build.sh [--src SRC] [--dry-run] [baseline|patched]
#                                          prints the path of the cached bzImage
#   linux-X.Y/build.sh --base-config FILE [baseline|patched]
#                                          the same on a distribution's own
#                                          config (FILE: its /boot/config-*)
#   linux-X.Y/build.sh checkpatch          scripts/checkpatch.pl --strict on the
#                                          cover letter and every patch
#   linux-X.Y/build.sh each                apply the patches one by one and build
#                                          after each (every patch must build),
#                                          then as patched (cached as patched)
#   linux-6.1/build.sh labhost             the lab host's own (L2) kernel for
#                                          `ci/lab/lab --host-iommu virtio`
#
# The source (SRC: --src, else $LINUX_SRC_X_Y such as LINUX_SRC_6_12, else
# $LINUX_SRC):
#   debian (or unset)  Debian's linux-source-X.Y package,
#                      /usr/src/linux-source-X.Y.tar.xz (the default, CI's);
#                      for a series whose package is in another suite (its
#                      README's "Debian suite:" line; 7.2: trixie-backports)
#                      the tarball fetch-debian-source.sh X.Y put in
#                      $VIOMMU_LAB_CACHE/debian/linux-source-X.Y/ when
#                      /usr/src has none
#   a directory        a kernel tree (a git clone, an extracted tarball); it is
#                      copied, never modified
#   a tarball          linux-X.Y.N.tar.xz from kernel.org (.tar.gz, .tar.bz2,
#                      .tar.zst and .tar too), extracted once into the cache
# Its version is read from its Makefile (VERSION, PATCHLEVEL, SUBLEVEL,
# EXTRAVERSION) and must be X.Y; the series says which upstream base it
# applies to in linux-X.Y/README.md ("Upstream base:"), and a patch that does
# not apply says which version was found and which one the series wants.
#
# baseline: tinyconfig + config-fragment, no patches (stock X.Y).
# With --base-config FILE, baseline and patched start from FILE (a
# distribution's config, e.g. Debian's /boot/config-RELEASE) instead of
# tinyconfig, with config-fragment-distro in place of config-fragment: the
# kernel differs from the distribution's own by the series and that
# fragment's few lines (no modules; the lab guest's drivers built in).
# patched:  the same plus config-fragment-patched, with patches/series applied.
# labhost:  baseline plus ci/lab/host-config-fragment (KVM, VFIO, virtio-iommu
#           as a lab host under the outer QEMU's virtio-iommu), no patches:
#           not a guest, but built the same way and cached alike.
# The fragments in guest-patches/ serve every version; linux-X.Y/ may add its
# own config-fragment and config-fragment-patched, merged after them.
#
# Output is cached under $VIOMMU_LAB_CACHE (default ~/.cache/viommu-lab),
# keyed by a hash of the source's identity (Debian's package version; a
# tarball's sha256; a git tree's commit and uncommitted changes, another
# tree's file names, sizes and mtimes), the kernel version from its Makefile,
# the fragments, the patches and the two scripts: a second run with the same
# inputs is a no-op. Each version and variant keeps its own object directory
# (work/linux-X.Y-VARIANT), whatever the source, so a changed patch or source
# rebuilds only what it touches; builds of one variant are serialised with
# flock. JOBS sets make's -j (default: nproc). --dry-run prints the source,
# its version, the key and whether the kernel is cached, and builds nothing.
#
# The build tools are checked first; missing ones are named with the command
# that installs them on this distribution (/etc/os-release).
#
# With ccache installed, compiles go through it (cache: $VIOMMU_LAB_CACHE/
# ccache): on a fresh machine the patched kernel then compiles only the
# files its patches and options change, the rest comes from the baseline's
# build of the same version. The variants' trees share one layout
# (work/linux-X.Y-VARIANT/{src,obj}), so with paths under work/ rewritten
# relative to the object directory (base_dir) and the directory itself not
# hashed, their compiles hash alike. NO_CCACHE=1 turns it off.
set -euo pipefail

ver=${1:-}
case "$ver" in
[0-9]*.[0-9]*) shift ;;
*)
	echo "usage: build-kernel.sh X.Y [--src SRC] [--dry-run] [baseline|patched|checkpatch|each|labhost]" >&2
	exit 2
	;;
esac
top=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
here=$top/linux-$ver
cache=${VIOMMU_LAB_CACHE:-$HOME/.cache/viommu-lab}
jobs=${JOBS:-$(nproc)}
pkg=linux-source-$ver
# Debian's package's tarball (overridable for the tests only).
deb_tarball=${LINUX_SOURCE_DEB:-/usr/src/$pkg.tar.xz}
variant=

log() { echo "[guest-kernel-$ver${variant:+:$variant}] $*" >&2; }
die() {
	echo "[guest-kernel-$ver${variant:+:$variant}] error: $*" >&2
	exit 1
}

usage() {
	cat <<EOF
usage: guest-patches/linux-$ver/build.sh [--src SRC] [--base-config FILE] [--dry-run] [VARIANT]

VARIANT: baseline (default), patched, checkpatch, each, labhost.
--base-config FILE: baseline or patched on a distribution's config (FILE,
e.g. /boot/config-\$(uname -r)) instead of tinyconfig.
SRC (--src, else \$LINUX_SRC_${ver//./_}, else \$LINUX_SRC): 'debian' (the
default: Debian's $pkg package), a kernel tree (directory) or a
kernel.org tarball (linux-$ver.N.tar.xz). Prints the bzImage's path.
See guest-patches/README.md.
EOF
}

src='' src_from='' base_config=''
src_var=LINUX_SRC_${ver//./_}
dry_run=0
while [ $# -gt 0 ]; do
	case "$1" in
	--src)
		[ $# -ge 2 ] || die "--src needs a value: a kernel tree, a linux-$ver.N.tar.xz or 'debian'"
		src=$2 src_from="--src "
		shift 2
		;;
	--src=*) src=${1#--src=} src_from="--src " && shift ;;
	--base-config)
		[ $# -ge 2 ] || die "--base-config needs a value: a distribution's kernel config, e.g. /boot/config-\$(uname -r)"
		base_config=$2
		shift 2
		;;
	--base-config=*) base_config=${1#--base-config=} && shift ;;
	--dry-run) dry_run=1 && shift ;;
	-h | --help) usage && exit 0 ;;
	-*) die "unknown option '$1' (expected --src SRC, --dry-run or --help)" ;;
	*)
		[ -z "$variant" ] || die "one variant at a time (got '$variant' and '$1')"
		variant=$1
		shift
		;;
	esac
done
variant=${variant:-baseline}
case "$variant" in
baseline | patched | checkpatch | each | labhost) ;;
*) die "unknown variant '$variant' (expected baseline, patched, checkpatch, each or labhost)" ;;
esac
[ -d "$here" ] || die "no series directory $here"
if [ -n "$base_config" ]; then
	case "$variant" in baseline | patched) ;; *) die "--base-config builds baseline or patched, not $variant" ;; esac
	[ -f "$base_config" ] && grep -q '^CONFIG_' "$base_config" ||
		die "--base-config $base_config: not a kernel config (expected a file of CONFIG_ lines, e.g. /boot/config-\$(uname -r))"
	base_config=$(realpath "$base_config")
fi
if [ -z "$src_from" ]; then
	if [ -n "${!src_var:-}" ]; then
		src=${!src_var} src_from="$src_var="
	else
		src=${LINUX_SRC:-} src_from="LINUX_SRC="
	fi
fi

# ---- the distribution, for install hints

# The words of /etc/os-release's ID, then ID_LIKE, lower case.
os_ids() {
	local f=${VIOMMU_OS_RELEASE:-/etc/os-release}
	[ -r "$f" ] || f=/usr/lib/os-release
	[ -r "$f" ] || return 0
	{
		sed -n 's/^ID=//p' "$f"
		sed -n 's/^ID_LIKE=//p' "$f"
	} | tr -d "\"'" | tr '[:upper:]' '[:lower:]'
}

# The package manager: apt, dnf, zypper, pacman or unknown (as the bench
# tool's PkgManager::from_os_release).
pkg_manager() {
	local id
	for id in $(os_ids); do
		case "$id" in
		debian | ubuntu | linuxmint | pop | raspbian | kali) echo apt && return ;;
		fedora | rhel | centos | rocky | almalinux | ol | amzn) echo dnf && return ;;
		opensuse | suse | sles | opensuse-leap | opensuse-tumbleweed) echo zypper && return ;;
		arch | manjaro | endeavouros) echo pacman && return ;;
		esac
	done
	echo unknown
}

# pkg_of MANAGER TOOL: the package that brings TOOL (libelf: the libelf
# headers objtool builds with).
pkg_of() {
	case "$1:$2" in
	*:awk) echo gawk ;;
	*:ld) echo binutils ;;
	*:cmp) echo diffutils ;;
	*:flock) echo util-linux ;;
	apt:xz) echo xz-utils ;;
	apt:libelf) echo libelf-dev ;;
	dnf:libelf) echo elfutils-libelf-devel ;;
	zypper:libelf) echo libelf-devel ;;
	*:libelf) echo libelf ;;
	*) echo "$2" ;;
	esac
}

# pkgs_for MANAGER TOOL...: the packages, each once, in the tools' order.
pkgs_for() {
	local pm=$1 t p seen=" " list=()
	shift
	for t in "$@"; do
		p=$(pkg_of "$pm" "$t")
		case "$seen" in *" $p "*) continue ;; esac
		seen+="$p "
		list+=("$p")
	done
	echo "${list[*]}"
}

# install_cmd TOOL...: the command that installs them here.
install_cmd() {
	case "$(pkg_manager)" in
	apt) echo "apt-get install $(pkgs_for apt "$@")" ;;
	dnf) echo "dnf install $(pkgs_for dnf "$@")" ;;
	zypper) echo "zypper install $(pkgs_for zypper "$@")" ;;
	pacman) echo "pacman -S --needed $(pkgs_for pacman "$@")" ;;
	*) echo "install them with the distribution's package manager (Debian/Ubuntu: apt-get install $(pkgs_for apt "$@"); Fedora/RHEL: dnf install $(pkgs_for dnf "$@"); openSUSE: zypper install $(pkgs_for zypper "$@"); Arch: pacman -S --needed $(pkgs_for pacman "$@"))" ;;
	esac
}

# ---- the source: what it is, where it is, who it is

expect="a kernel tree (directory), a kernel.org tarball (linux-$ver.N.tar.xz) or 'debian' (Debian's $pkg, the default)"
what="$src_from$src"
case "$src" in
'' | debian)
	src_kind=debian
	# A series whose package comes from another suite (its README's "Debian
	# suite:" line, 7.2: trixie-backports): fetch-debian-source.sh puts
	# the package's tarball and version in the cache, /usr/src stays as is.
	deb_suite=$(sed -n 's/^Debian suite: *\([a-z0-9-]*\).*/\1/p' "$here/README.md" 2>/dev/null | head -n 1 || true)
	fetched=$cache/debian/$pkg
	if [ -n "$deb_suite" ]; then
		get="guest-patches/fetch-debian-source.sh $ver (fetches $pkg from $deb_suite into $fetched, installs nothing)"
	else
		get="apt-get install $pkg"
	fi
	if [ ! -r "$deb_tarball" ] && [ -r "$fetched/$pkg.tar.xz" ] && [ -s "$fetched/version" ]; then
		src=$fetched/$pkg.tar.xz
		srcver=$(cat "$fetched/version")
	elif [ -r "$deb_tarball" ]; then
		src=$deb_tarball
		# A copy of the tarball without its package: then as any tarball.
		srcver=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) || {
			src_kind=tarball
			what="$src (no $pkg package installed)"
		}
	else
		case " $(os_ids | head -n 1) " in
		" debian ")
			die "$deb_tarball missing: $get, or build from another source: LINUX_SRC=/path/to/linux-$ver.N.tar.xz (kernel.org) or a kernel tree (guest-patches/README.md)"
			;;
		*)
			die "Debian's $pkg (the default source, $deb_tarball) is not here: set LINUX_SRC=/path/to/linux-$ver.N.tar.xz (https://cdn.kernel.org/pub/linux/kernel/v${ver%%.*}.x/) or LINUX_SRC=/path/to/a/kernel/tree, or pass --src (guest-patches/README.md)"
			;;
		esac
	fi
	;;
*)
	if [ -d "$src" ]; then
		src_kind=tree
	elif [ -f "$src" ]; then
		case "$src" in
		*.tar.xz | *.txz | *.tar.gz | *.tgz | *.tar.bz2 | *.tbz2 | *.tar.zst | *.tar) src_kind=tarball ;;
		*) die "$what is a file but not a kernel tarball (.tar.xz, .tar.gz, .tar.bz2, .tar.zst, .tar): expected $expect" ;;
		esac
	elif [ -e "$src" ]; then
		die "$what is neither a directory nor a file: expected $expect"
	else
		die "$what: no such file or directory; expected $expect"
	fi
	src=$(realpath -- "$src")
	;;
esac

# ---- the build tools, up front

# What this variant needs: extraction of a tarball source; the whole
# toolchain for a build; perl for checkpatch.
need=()
if [ "$src_kind" != tree ]; then
	need+=(tar)
	case "$src" in
	*.xz | *.txz) need+=(xz) ;;
	*.gz | *.tgz) need+=(gzip) ;;
	*.bz2 | *.tbz2) need+=(bzip2) ;;
	*.zst) need+=(zstd) ;;
	esac
fi
if [ "$variant" = checkpatch ]; then
	need+=(perl)
else
	need+=(gcc ld make flex bison bc perl awk cmp rsync patch flock)
fi
missing=()
for t in "${need[@]}"; do
	command -v "$t" >/dev/null || missing+=("$t")
done
# objtool (CONFIG_OBJTOOL, on for x86-64) builds against libelf.
if [ "$variant" != checkpatch ] && command -v gcc >/dev/null &&
	! gcc -E -x c - >/dev/null 2>&1 <<<'#include <gelf.h>'; then
	missing+=(libelf)
fi
if [ ${#missing[@]} -gt 0 ]; then
	die "missing build tools: ${missing[*]/%libelf/libelf (gelf.h)}; $(install_cmd "${missing[@]}")"
fi

# makefile_version < Makefile: "VERSION PATCHLEVEL SUBLEVEL EXTRAVERSION"
# of a kernel's top Makefile (nothing if it is none).
makefile_version() {
	awk -F'[ \t]*=[ \t]*' '
		$1 == "VERSION" && v == "" { v = $2 }
		$1 == "PATCHLEVEL" && p == "" { p = $2 }
		$1 == "SUBLEVEL" && s == "" { s = $2 }
		$1 == "EXTRAVERSION" && !e_set { e = $2; e_set = 1 }
		END { if (v ~ /^[0-9]+$/ && p ~ /^[0-9]+$/) print v, p, (s == "" ? 0 : s), e }'
}

# The identity of a tree: a git work tree's commit and uncommitted changes
# (untracked files that .gitignore does not hide included), else the names,
# sizes and mtimes of its files.
tree_identity() {
	local d=$1 t head dirty
	if command -v git >/dev/null && t=$(git -C "$d" rev-parse --show-toplevel 2>/dev/null) && [ "$t" -ef "$d" ] &&
		head=$(git -C "$d" rev-parse -q --verify HEAD 2>/dev/null); then
		dirty=$(cd "$d" && {
			git diff HEAD --binary
			git ls-files -o --exclude-standard -z | xargs -0r sha256sum
		} | sha256sum | cut -c1-16)
		echo "tree git $head $dirty"
	else
		echo "tree files $(cd "$d" && find . -path ./.git -prune -o \( -type f -o -type l \) -printf '%P %s %T@\n' |
			LC_ALL=C sort | sha256sum | cut -c1-16)"
	fi
}

case "$src_kind" in
debian)
	src_id="$pkg $srcver"
	src_desc="Debian's $pkg $srcver"
	pristine="$cache/src/$pkg-$srcver"
	;;
tarball)
	sum=$(sha256sum <"$src" | cut -d' ' -f1)
	src_id="tarball sha256:$sum"
	src_desc="$what (sha256 ${sum:0:16})"
	base=$(basename "$src")
	base=${base%.tar*} base=${base%.t?z} base=${base%.tbz2}
	pristine="$cache/src/$base-${sum:0:16}"
	;;
tree)
	src_id=$(tree_identity "$src")
	src_desc="$what"
	pristine=$src
	;;
esac

# The kernel's version, from the Makefile of the extracted tree, else from
# the tarball (tar stops at the first top-level Makefile).
if [ -f "$pristine/.extracted" ] || [ "$src_kind" = tree ]; then
	v=$(makefile_version 2>/dev/null <"$pristine/Makefile" || true)
else
	v=$(tar -xOf "$src" --wildcards --no-wildcards-match-slash --occurrence=1 '*/Makefile' 2>/dev/null | makefile_version || true)
	# Not a tarball tar can read, or one without a kernel in it?
	[ -n "$v" ] || err=$(tar -tf "$src" 2>&1 >/dev/null) ||
		die "cannot read $what as a tarball: $(echo "$err" | head -n 1)"
fi
[ -n "$v" ] || die "$what is not a kernel source (no top-level Makefile with VERSION and PATCHLEVEL): expected $expect"
read -r v_major v_minor v_sub v_extra <<<"$v"
kver="$v_major.$v_minor.$v_sub${v_extra:-}"
[ "$v_major.$v_minor" = "$ver" ] || {
	if [ -x "$top/linux-$v_major.$v_minor/build.sh" ]; then
		other=", or build it with guest-patches/linux-$v_major.$v_minor/build.sh"
	else
		other="; there is no series for $v_major.$v_minor (series: $(for d in "$top"/linux-*/; do d=${d%/} && echo "${d##*/linux-}"; done | tr '\n' ' ' | sed 's/ $//'))"
	fi
	die "$what is linux $kver (its Makefile), but linux-$ver/build.sh builds v$ver.y: point it at a $ver source (kernel.org linux-$ver.N.tar.xz)$other"
}

# The upstream base the series applies to (its README's "Upstream base:"
# line) and the point release it was made against ("made against X.Y.Z").
base_line=$(sed -n 's/^Upstream base: *//p' "$here/README.md" 2>/dev/null | head -n 1 || true)
base_line=${base_line:-v$ver.y}
made_against=$(echo "$base_line" | sed -n 's/.*made against \(v\?[0-9][0-9.]*[0-9]\).*/\1/p')
made_against=${made_against#v}

if [ -n "$base_config" ]; then
	fragments=("$top/config-fragment-distro")
else
	fragments=("$top/config-fragment")
	[ -f "$here/config-fragment" ] && fragments+=("$here/config-fragment")
fi
patches=()
if [ "$variant" = labhost ]; then
	fragments+=("$top/../ci/lab/host-config-fragment")
	# what this version adds to the lab host (6.12: iommufd, VFIO cdevs)
	[ -f "$top/../ci/lab/host-config-fragment-$ver" ] && fragments+=("$top/../ci/lab/host-config-fragment-$ver")
elif [ "$variant" != baseline ]; then
	fragments+=("$top/config-fragment-patched")
	[ -f "$here/config-fragment-patched" ] && fragments+=("$here/config-fragment-patched")
	if [ -f "$here/patches/series" ]; then
		while read -r p; do
			case "$p" in '' | '#'*) continue ;; esac
			[ -f "$here/patches/$p" ] || die "patches/series names $p, which does not exist"
			patches+=("$here/patches/$p")
		done <"$here/patches/series"
	fi
fi

# extract_once DEST PART CHECK [MEMBER...]: extracts the source tarball
# (only the MEMBERs, tar wildcards, if named) into DEST, once per source:
# into DEST.tmp, then `CHECK DEST.tmp` (it dies on a tree that is not
# what it needs, and may complete it), then renamed. One extraction per
# source at a time: checkpatch and the builds of the source's variants
# may race (CI builds kernels in the background while its checkpatch
# steps run); the loser finds the tree extracted. PART names what is
# extracted, in the log and in errors.
extract_once() {
	local dest=$1 part=$2 check=$3 err
	shift 3
	[ -f "$dest/.extracted" ] && return 0
	mkdir -p "$cache/src"
	exec 8>"$pristine.lock"
	flock 8
	if [ ! -f "$dest/.extracted" ]; then
		log "extracting $part from $src (once per source)"
		rm -rf "$dest" "$dest.tmp"
		mkdir -p "$dest.tmp"
		[ $# -eq 0 ] || set -- --wildcards --no-wildcards-match-slash "$@"
		err=$(tar -xf "$src" -C "$dest.tmp" --strip-components=1 "$@" 2>&1) ||
			die "cannot extract $part from $what into $dest.tmp: $(echo "$err" | head -n 1) (expected $expect)"
		"$check" "$dest.tmp"
		touch "$dest.tmp/.extracted"
		mv "$dest.tmp" "$dest"
	fi
	exec 8>&-
}

whole_tree_check() {
	[ -f "$1/Makefile" ] || die "$what has no top-level Makefile after extraction: expected $expect"
}

# extract_pristine: the whole source tree, for a build.
extract_pristine() {
	[ "$src_kind" != tree ] || return 0
	extract_once "$pristine" "the whole tree" whole_tree_check
}

checkpatch_tree_check() {
	[ -x "$1/scripts/checkpatch.pl" ] || die "$what has no scripts/checkpatch.pl: expected $expect"
	# the rest of the top-level entries checkpatch looks for, empty
	(cd "$1" && mkdir -p arch drivers fs init ipc kernel lib)
}

# checkpatch_tree: a directory checkpatch.pl can run from. It reads only a
# few of a tree's files (scripts/: itself, spelling.txt,
# const_structs.checkpatch, get_maintainer.pl; MAINTAINERS; include/linux/
# for its <asm/...> check) and checks that a kernel tree's top-level
# entries exist. So where no whole tree is extracted yet, only those are
# (30 MB, 9 s for 6.1 instead of the whole 1.4 GB): CI builds no 6.1 or
# 7.3 kernel and extracted both trees for checkpatch alone.
checkpatch_tree() {
	if [ "$src_kind" = tree ] || [ -f "$pristine/.extracted" ]; then
		cp_tree=$pristine
		return 0
	fi
	cp_tree=$pristine.checkpatch
	extract_once "$cp_tree" "what checkpatch.pl reads" checkpatch_tree_check \
		'*/scripts' '*/include/linux' '*/Documentation/dev-tools' \
		'*/MAINTAINERS' '*/COPYING' '*/CREDITS' '*/Kbuild' '*/Makefile' '*/README'
}

if [ "$variant" = checkpatch ]; then
	[ $dry_run = 0 ] || {
		echo "source: $src_desc"
		echo "version: linux $kver"
		exit 0
	}
	checkpatch_tree
	bad=0
	for p in "$here/patches/0000-cover-letter.patch" "${patches[@]}"; do
		[ -f "$p" ] || continue
		if out=$(cd "$cp_tree" && ./scripts/checkpatch.pl --strict -q "$p" 2>&1); then
			log "checkpatch --strict clean: $(basename "$p")"
		else
			echo "$out" >&2
			bad=1
		fi
	done
	exit $bad
fi

key=$({
	echo "$src_id"
	echo "linux $kver"
	for f in "$top/build-kernel.sh" "$here/build.sh" ${base_config:+"$base_config"} "${fragments[@]}" "${patches[@]}"; do
		echo "== ${f#"$top"/}"
		cat "$f"
	done
} | sha256sum | cut -c1-16)
# 'each' builds the patched kernel in the end, in the patched variant's
# object directory (the patched build after it is then incremental).
kind=$variant
[ "$variant" = each ] && kind=patched
# On a distribution's config: an object directory and cache name of its own.
[ -z "$base_config" ] || kind=$variant-distro
out="$cache/kernels/linux-$ver-$kind-$key"
if [ $dry_run = 1 ]; then
	echo "source: $src_desc"
	echo "version: linux $kver"
	echo "series: $base_line"
	echo "key: $key"
	if [ -f "$out/bzImage" ]; then echo "cached: $out/bzImage"; else echo "not built: $out/bzImage"; fi
	exit 0
fi
if [ "$variant" != each ] && [ -f "$out/bzImage" ]; then
	log "cached: $out/bzImage"
	echo "$out/bzImage"
	exit 0
fi

work="$cache/work/linux-$ver-$kind"
mkdir -p "$work"
# One build per variant at a time (the lab and developers may race); the
# loser finds the winner's result in the cache.
exec 9>"$work.lock"
flock 9
if [ "$variant" != each ] && [ -f "$out/bzImage" ]; then
	log "cached (built meanwhile): $out/bzImage"
	echo "$out/bzImage"
	exit 0
fi
log "source: $src_desc, linux $kver"
if [ ${#patches[@]} -gt 0 ] && [ -n "$made_against" ] && [ "$made_against" != "$kver" ]; then
	log "note: the series was made against $made_against, this is $kver: a patch may not apply"
fi
extract_pristine

# The variant's own source tree: reset to the source by content (files that
# differ get a new mtime, so make rebuilds exactly what changed), then patch.
# From a tree of yours: without its .git and without what a build in place
# left (make O= refuses a source tree with a .config or include/config).
tree="$work/src"
obj="$work/obj"
mkdir -p "$tree" "$obj"
rsync -rlc --delete --exclude=/.extracted --exclude=/.git --exclude=/.config \
	--exclude=/include/config/ --exclude=/include/generated/ --exclude='/arch/*/include/generated/' \
	--exclude='*.o' --exclude='.*.cmd' "$pristine/" "$tree/"

# make in the variant's tree, through ccache when there is one.
cc=()
if [ -z "${NO_CCACHE:-}" ] && command -v ccache >/dev/null; then
	export CCACHE_DIR=$cache/ccache CCACHE_BASEDIR=$cache/work CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=4G
	cc=(CC="ccache gcc")
fi
kmake() { make -s -C "$tree" O="$obj" "${cc[@]}" "$@"; }

apply() {
	log "applying $(basename "$1")"
	patch -d "$tree" -p1 --quiet --forward --no-backup-if-mismatch <"$1" ||
		die "$(basename "$1") does not apply to linux $kver from $src_desc: the series wants $base_line; found $kver (see guest-patches/linux-$ver/README.md)"
}

# Merge the fragments into the object directory's .config, then let
# olddefconfig settle the options they imply.
merge_fragments() {
	"$tree/scripts/kconfig/merge_config.sh" -m -O "$obj" "$obj/.config" "${fragments[@]}" >/dev/null
	kmake olddefconfig >/dev/null
}

# distro_builtin_config FILE: FILE with every module ("=m") turned off.
# With CONFIG_MODULES off, Kconfig reads each tristate as a bool and turns
# a left "=m" into "=y": Debian 13's 4052 modules would all be compiled
# into the bzImage, a kernel far from the package and a build many times
# longer. Off, the kernel keeps what the distribution builds in, and the
# fragments add back the few drivers a lab guest needs.
distro_builtin_config() {
	sed -E 's/^(CONFIG_[A-Za-z0-9_]+)=m$/# \1 is not set/' "$1"
}

configure() {
	if [ -n "$base_config" ]; then
		log "configuring ($base_config without its modules + ${#fragments[@]} fragment(s))"
		distro_builtin_config "$base_config" >"$obj/.config"
	else
		log "configuring (tinyconfig + ${#fragments[@]} fragment(s))"
		kmake tinyconfig >/dev/null
	fi
	merge_fragments
	local missing
	# An =y line lost (a dependency is off), or a "# ... is not set" line
	# turned on (a default, or something that selects it).
	missing=$(cat "${fragments[@]}" | grep -E '^CONFIG_[A-Z0-9_]+=|^# CONFIG_[A-Z0-9_]+ is not set$' | while read -r want; do
		case "$want" in
		"# "*)
			opt=${want#\# }
			! grep -qE "^${opt%% *}=" "$obj/.config" || echo "$want"
			;;
		*) grep -qxF "$want" "$obj/.config" || echo "$want" ;;
		esac
	done)
	[ -z "$missing" ] || die "options olddefconfig did not keep as the fragments say (a dependency is off, or a default or select turns one on): ${missing//$'\n'/ }"
}

# Build bzImage ($1 names the step in messages). Compiler warnings are shown,
# the series must not add any.
build() {
	log "building bzImage with -j$jobs ($1; about 5 minutes from scratch on 2 cores)"
	local start=$SECONDS
	kmake -j"$jobs" bzImage >"$work/build.log" 2>&1 || {
		tail -n 40 "$work/build.log" >&2
		die "kernel build failed ($1); full log: $work/build.log"
	}
	if grep -E 'warning:' "$work/build.log" >&2; then
		log "the build warns ($1); full log: $work/build.log"
	fi
	log "built in $((SECONDS - start)) s ($1)"
}

if [ "$variant" = each ]; then
	# The options of the patched kernel from the start: a patch that adds
	# one of them must still build with it set, and every later patch too.
	# The fragments may name options the first patches don't have yet:
	# olddefconfig drops those, which is fine here.
	kmake tinyconfig >/dev/null
	merge_fragments
	build "no patch"
	for p in "${patches[@]}"; do
		apply "$p"
		# Kconfig options a patch adds become available now
		merge_fragments
		build "$(basename "$p")"
	done
	log "every patch builds"
else
	for p in "${patches[@]}"; do
		apply "$p"
	done
fi
configure
build "$kind"

mkdir -p "$out.tmp"
# System.map beside it: a hung guest's addresses (our VMM's vm.vcpus) are
# symbolized with it (ci/lab/symbolize).
cp "$obj/arch/x86/boot/bzImage" "$obj/.config" "$obj/System.map" "$out.tmp/"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out/bzImage"
