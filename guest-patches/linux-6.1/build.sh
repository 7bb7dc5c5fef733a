#!/usr/bin/env bash
# Build the lab's guest (L3) kernel from Debian's linux-source-6.1.
#
#   build.sh [baseline|patched]     prints the path of the cached bzImage
#   build.sh checkpatch             scripts/checkpatch.pl --strict on the series
#
# baseline: tinyconfig + config-fragment, no patches (stock 6.1).
# patched:  the same plus config-fragment-patched, with patches/series applied.
#
# Output is cached under $VIOMMU_LAB_CACHE (default ~/.cache/viommu-lab),
# keyed by a hash of the source package version, the fragments, the patches
# and this script: a second run with the same inputs is a no-op. Each
# variant keeps its own object directory, so a changed patch rebuilds only
# what it touches.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
variant=${1:-baseline}
cache=${VIOMMU_LAB_CACHE:-$HOME/.cache/viommu-lab}
jobs=${JOBS:-$(nproc)}
tarball=/usr/src/linux-source-6.1.tar.xz

log() { echo "[guest-kernel:$variant] $*" >&2; }
die() { echo "[guest-kernel:$variant] error: $*" >&2; exit 1; }

case "$variant" in
baseline | patched | checkpatch) ;;
*) die "unknown variant '$variant' (expected baseline, patched or checkpatch)" ;;
esac
[ -r "$tarball" ] || die "$tarball missing: apt-get install linux-source-6.1"

srcver=$(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null) ||
	die "cannot read the version of package linux-source-6.1"

fragments=("$here/config-fragment")
patches=()
if [ "$variant" != baseline ]; then
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
	pristine="$cache/src/linux-source-$srcver"
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
	echo "linux-source-6.1 $srcver"
	for f in "${BASH_SOURCE[0]}" "${fragments[@]}" "${patches[@]}"; do
		echo "== $(basename "$f")"
		cat "$f"
	done
} | sha256sum | cut -c1-16)
out="$cache/kernels/$variant-$key"
if [ -f "$out/bzImage" ]; then
	log "cached: $out/bzImage"
	echo "$out/bzImage"
	exit 0
fi

mkdir -p "$cache/work/$variant"
# One build per variant at a time (the lab and developers may race); the
# loser finds the winner's result in the cache.
exec 9>"$cache/work/$variant.lock"
flock 9
if [ -f "$out/bzImage" ]; then
	log "cached (built meanwhile): $out/bzImage"
	echo "$out/bzImage"
	exit 0
fi
extract_pristine

# The variant's own source tree: reset to pristine by content (files that
# differ get a new mtime, so make rebuilds exactly what changed), then patch.
tree="$cache/work/$variant/src"
obj="$cache/work/$variant/obj"
mkdir -p "$tree" "$obj"
rsync -rlc --delete --exclude=/.extracted "$pristine/" "$tree/"
for p in "${patches[@]}"; do
	log "applying $(basename "$p")"
	patch -d "$tree" -p1 --quiet --forward --no-backup-if-mismatch <"$p" ||
		die "$(basename "$p") does not apply to linux-source $srcver"
done

log "configuring (tinyconfig + ${#fragments[@]} fragment(s))"
make -s -C "$tree" O="$obj" tinyconfig >/dev/null
"$tree/scripts/kconfig/merge_config.sh" -m -O "$obj" "$obj/.config" "${fragments[@]}" >/dev/null
make -s -C "$tree" O="$obj" olddefconfig >/dev/null
missing=$(cat "${fragments[@]}" | grep -E '^CONFIG_[A-Z0-9_]+=' | while read -r want; do
	grep -qxF "$want" "$obj/.config" || echo "$want"
done)
[ -z "$missing" ] || die "options lost by olddefconfig (a dependency is off): $(echo $missing)"

log "building bzImage with -j$jobs (about 4 minutes from scratch on 2 cores)"
start=$(date +%s)
make -s -C "$tree" O="$obj" -j"$jobs" bzImage >"$cache/work/$variant/build.log" 2>&1 || {
	tail -n 40 "$cache/work/$variant/build.log" >&2
	die "kernel build failed; full log: $cache/work/$variant/build.log"
}
log "built in $(($(date +%s) - start)) s"

mkdir -p "$out.tmp"
cp "$obj/arch/x86/boot/bzImage" "$obj/.config" "$out.tmp/"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out/bzImage"
