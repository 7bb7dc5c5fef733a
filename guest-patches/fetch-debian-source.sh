#!/usr/bin/env bash
# Fetch Debian's linux-source-X.Y from the suite its series names, without
# installing it and without touching the system's packages or apt state:
#
#   guest-patches/fetch-debian-source.sh X.Y     e.g. 7.2
#
# The suite is the "Debian suite:" line of guest-patches/linux-X.Y/README.md
# (7.2: trixie-backports). A series without that line takes its package from
# the machine's own suites (apt-get install linux-source-X.Y), and this
# script says so. Otherwise apt runs with a configuration of its own (its
# sources, lists and download cache under $VIOMMU_LAB_CACHE/apt/SUITE), so
# the machine's sources.list, package lists and installed packages stay as
# they are: `apt-get update` for that suite alone, `apt-get download` of the
# package's newest version there, and its tarball extracted with dpkg-deb to
#
#   $VIOMMU_LAB_CACHE/debian/linux-source-X.Y/linux-source-X.Y.tar.xz
#   $VIOMMU_LAB_CACHE/debian/linux-source-X.Y/version   (the package version)
#
# where build-kernel.sh looks for Debian's source when /usr/src has none.
# Needs apt-get and dpkg-deb (any Debian or Ubuntu), not root. Idempotent:
# a second run fetches again only if the suite has a newer version.
# DEBIAN_MIRROR overrides http://deb.debian.org/debian.
set -euo pipefail

ver=${1:-}
case "$ver" in
[0-9]*.[0-9]*) ;;
*)
	echo "usage: fetch-debian-source.sh X.Y" >&2
	exit 2
	;;
esac
top=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
here=$top/linux-$ver
cache=${VIOMMU_LAB_CACHE:-$HOME/.cache/viommu-lab}
pkg=linux-source-$ver
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
log() { echo "[fetch-debian-source-$ver] $*" >&2; }
die() {
	echo "[fetch-debian-source-$ver] error: $*" >&2
	exit 1
}

[ -f "$here/README.md" ] || die "no series directory $here"
suite=$(sed -n 's/^Debian suite: *\([a-z0-9-]*\).*/\1/p' "$here/README.md" | head -n 1)
if [ -z "$suite" ]; then
	log "the linux-$ver series takes $pkg from the machine's own suites: apt-get install $pkg"
	exit 0
fi
for t in apt-get dpkg-deb; do
	command -v "$t" >/dev/null || die "$t is needed (Debian or Ubuntu); or build from a kernel.org tarball: LINUX_SRC_${ver//./_}=/path/to/linux-$ver.N.tar.xz"
done
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || die "$keyring missing: apt-get install debian-archive-keyring"

a=$cache/apt/$suite
mkdir -p "$a/lists/partial" "$a/archives/partial" "$a/prefs.d"
# One fetch per suite at a time (CI's background kernel builds and its
# checkpatch step may both ask for the same source).
exec 9>"$a/.lock"
flock 9
echo "deb [signed-by=$keyring] $mirror $suite main" >"$a/sources.list"
opts=(-q -o "Dir::Etc::SourceList=$a/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$a/lists" -o "Dir::Cache=$a" -o "Dir::Cache::Archives=$a/archives"
	-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
	-o Dir::Etc::Preferences=/dev/null -o "Dir::Etc::PreferencesParts=$a/prefs.d"
	-o Acquire::Languages=none -o APT::Get::List-Cleanup=0 -o Debug::NoLocking=1
	-o APT::Sandbox::User=root)

log "apt-get update for $suite alone (lists in $a)"
apt-get "${opts[@]}" update >"$a/update.log" 2>&1 || {
	tail -n 5 "$a/update.log" >&2
	die "apt-get update of $suite failed (full log: $a/update.log)"
}
want=$(apt-cache "${opts[@]}" show "$pkg" 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -n 1)
[ -n "$want" ] || die "$suite has no $pkg"

dest=$cache/debian/$pkg
if [ -f "$dest/version" ] && [ "$(cat "$dest/version")" = "$want" ] && [ -f "$dest/$pkg.tar.xz" ]; then
	log "$pkg $want from $suite already here: $dest/$pkg.tar.xz"
	exit 0
fi
log "downloading $pkg $want from $suite"
(cd "$a/archives" && apt-get "${opts[@]}" download "$pkg=$want" >"$a/download.log" 2>&1) || {
	tail -n 5 "$a/download.log" >&2
	die "apt-get download $pkg=$want failed (full log: $a/download.log)"
}
deb=$(ls "$a/archives/${pkg}_${want/:/%3a}_all.deb" 2>/dev/null || true)
[ -f "$deb" ] || die "apt-get download left no ${pkg}_${want}_all.deb in $a/archives"

rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
log "extracting usr/src/$pkg.tar.xz from $(basename "$deb")"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dest.tmp" "./usr/src/$pkg.tar.xz" ||
	die "$(basename "$deb") has no usr/src/$pkg.tar.xz"
mv "$dest.tmp/usr/src/$pkg.tar.xz" "$dest.tmp/$pkg.tar.xz"
rm -rf "$dest.tmp/usr"
echo "$want" >"$dest.tmp/version"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
# The tarball is all we keep.
rm -f "$a/archives/${pkg}_"*.deb
log "$pkg $want: $dest/$pkg.tar.xz"
