#!/usr/bin/env bash
# Build the lab's guest (L3) kernel from one of Debian's linux-source-X.Y
# packages, for the series in guest-patches/linux-X.Y/. Called by the
# series' own build.sh, which passes its version:
#
#   linux-X.Y/build.sh [baseline|patched]  prints the path of the cached bzImage
#   linux-X.Y/build.sh checkpatch          scripts/checkpatch.pl --strict on the
#                                          cover letter and every patch
#   linux-X.Y/build.sh each                apply the patches one by one and build
#                                          after each (every patch must build),
#                                          then as patched (cached as patched)
#   linux-6.1/build.sh labhost             the lab host's own (L2) kernel for
#                                          `ci/lab/lab --host-iommu virtio`
#
# baseline: tinyconfig + config-fragment, no patches (stock X.Y).
# patched:  the same plus config-fragment-patched, with patches/series applied.
# labhost:  baseline plus ci/lab/host-config-fragment (KVM, VFIO, virtio-iommu
#           as a lab host under the outer QEMU's virtio-iommu), no patches:
#           not a guest, but built the same way and cached alike.
# The fragments in guest-patches/ serve every version; linux-X.Y/ may add its
# own config-fragment and config-fragment-patched, merged after them.
#
# Output is cached under $VIOMMU_LAB_CACHE (default ~/.cache/viommu-lab),
# keyed by a hash of the source package version, the fragments, the patches
# and the two scripts: a second run with the same inputs is a no-op. Each
# version and variant keeps its own object directory (work/linux-X.Y-VARIANT),
# so a changed patch rebuilds only what it touches; builds of one variant are
# serialised with flock. JOBS sets make's -j (default: nproc).
#
# With ccache installed, compiles go through it (cache: $VIOMMU_LAB_CACHE/
# ccache): on a fresh machine the patched kernel then compiles only the
# files its patches and options change, the rest comes from the baseline's
# build of the same version. The variants' trees share one layout
# (work/linux-X.Y-VARIANT/{src,obj}), so with paths under work/ rewritten
# relative to the object directory (base_dir) and the directory itself not
# hashed, their compiles hash alike. NO_CCACHE=1 turns it off.
set -euo pipefail

ver=${1:?usage: build-kernel.sh X.Y [baseline|patched|checkpatch|each]}
variant=${2:-baseline}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
here=$top/linux-$ver
cache=${VIOMMU_LAB_CACHE:-$HOME/.cache/viommu-lab}
jobs=${JOBS:-$(nproc)}
pkg=linux-source-$ver
tarball=/usr/src/$pkg.tar.xz

cc=()
if [ -z "${NO_CCACHE:-}" ] && command -v ccache >/dev/null; then
	export CCACHE_DIR=$cache/ccache CCACHE_BASEDIR=$cache/work CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=4G
	cc=(CC="ccache gcc")
fi

log() { echo "[guest-kernel-$ver:$variant] $*" >&2; }
die() { echo "[guest-kernel-$ver:$variant] error: $*" >&2; exit 1; }

case "$variant" in
baseline | patched | checkpatch | each | labhost) ;;
*) die "unknown variant '$variant' (expected baseline, patched, checkpatch, each or labhost)" ;;
esac
[ -r "$tarball" ] || die "$tarball missing: apt-get install $pkg"

srcver=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) ||
	die "cannot read the version of package $pkg"

[ -d "$here" ] || die "no series directory $here"
fragments=("$top/config-fragment")
[ -f "$here/config-fragment" ] && fragments+=("$here/config-fragment")
patches=()
if [ "$variant" = labhost ]; then
	fragments+=("$top/../ci/lab/host-config-fragment")
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

extract_pristine() {
	pristine="$cache/src/$pkg-$srcver"
	[ -f "$pristine/.extracted" ] && return
	log "extracting $tarball (once per source version)"
	mkdir -p "$cache/src"
	rm -rf "$pristine" "$pristine.tmp"
	mkdir -p "$pristine.tmp"
	tar -xf "$tarball" -C "$pristine.tmp" --strip-components=1
	touch "$pristine.tmp/.extracted"
	mv "$pristine.tmp" "$pristine"
}

if [ "$variant" = checkpatch ]; then
	extract_pristine
	bad=0
	for p in "$here/patches/0000-cover-letter.patch" "${patches[@]}"; do
		[ -f "$p" ] || continue
		if out=$(cd "$pristine" && ./scripts/checkpatch.pl --strict -q "$p" 2>&1); then
			log "checkpatch --strict clean: $(basename "$p")"
		else
			echo "$out" >&2
			bad=1
		fi
	done
	exit $bad
fi

key=$({
	echo "$pkg $srcver"
	for f in "$top/build-kernel.sh" "$here/build.sh" "${fragments[@]}" "${patches[@]}"; do
		echo "== ${f#"$top"/}"
		cat "$f"
	done
} | sha256sum | cut -c1-16)
# 'each' builds the patched kernel in the end, in the patched variant's
# object directory (the patched build after it is then incremental).
kind=$variant
[ "$variant" = each ] && kind=patched
out="$cache/kernels/linux-$ver-$kind-$key"
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
extract_pristine

# The variant's own source tree: reset to pristine by content (files that
# differ get a new mtime, so make rebuilds exactly what changed), then patch.
tree="$work/src"
obj="$work/obj"
mkdir -p "$tree" "$obj"
rsync -rlc --delete --exclude=/.extracted "$pristine/" "$tree/"

# make in the variant's tree, through ccache when there is one.
kmake() { make -s -C "$tree" O="$obj" "${cc[@]}" "$@"; }

apply() {
	log "applying $(basename "$1")"
	patch -d "$tree" -p1 --quiet --forward --no-backup-if-mismatch <"$1" ||
		die "$(basename "$1") does not apply to $pkg $srcver"
}

# Merge the fragments into the object directory's .config, then let
# olddefconfig settle the options they imply.
merge_fragments() {
	"$tree/scripts/kconfig/merge_config.sh" -m -O "$obj" "$obj/.config" "${fragments[@]}" >/dev/null
	kmake olddefconfig >/dev/null
}

configure() {
	log "configuring (tinyconfig + ${#fragments[@]} fragment(s))"
	kmake tinyconfig >/dev/null
	merge_fragments
	local missing
	missing=$(cat "${fragments[@]}" | grep -E '^CONFIG_[A-Z0-9_]+=' | while read -r want; do
		grep -qxF "$want" "$obj/.config" || echo "$want"
	done)
	[ -z "$missing" ] || die "options lost by olddefconfig (a dependency is off): $(echo $missing)"
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
