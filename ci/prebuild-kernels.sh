#!/usr/bin/env bash
# Build, ahead and one after another, every kernel the given lab scenarios
# will boot (guest kernels and the lab host's own), in the order they first
# need them (`ci/lab/lab kernels`), then the fixed outer QEMU their lab
# hosts run under (`ci/lab/lab outer-qemus`, ci/lab/outer-qemu/build):
#
#   ci/prebuild-kernels.sh SCENARIO...
#
# ci/test.sh starts it in the background at the lowest CPU priority (nice
# 19, and its session's autogroup at 19 too: ci/test.sh says why) before
# its first step, so the kernels compile beside the cargo, fuzz and
# checkpatch steps without slowing them much, and waits for it before its
# first lab step: beside a kernel build the lab steps' emulation ran up to
# twice as long and starved the build (ci/test.sh). A lab step run by
# hand that needs a kernel being built waits for it on the build's lock
# (build-kernel.sh) instead of building it a second time. Built one by
# one in a step of their own, six kernels took over half an hour of a
# cold run on 2 cores; here that time overlaps the steps that do not
# need them (docs/testing.md has the timings).
#
# One line per kernel on stderr with its time; exit 1 if any build failed
# (the lab step that needs it then fails with the build's own error).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || {
	echo "usage: ci/prebuild-kernels.sh SCENARIO..." >&2
	exit 2
}
list=$(ci/lab/lab kernels "$@") || exit 1
logs=${VIOMMU_LAB_CACHE:-$HOME/.cache/viommu-lab}/logs
mkdir -p "$logs"
status=0
while read -r version variant; do
	start=$SECONDS
	# A series whose Debian package is in another suite (7.3) fetches its
	# source first; the others come from the machine's linux-source-X.Y.
	if [ ! -f "/usr/src/linux-source-$version.tar.xz" ] &&
		! guest-patches/fetch-debian-source.sh "$version" >/dev/null 2>&1; then
		echo "[prebuild] linux-$version $variant: fetching its source failed (guest-patches/fetch-debian-source.sh $version)" >&2
		status=1
		continue
	fi
	log=$logs/prebuild-$version-$variant.log
	if guest-patches/"linux-$version"/build.sh "$variant" >/dev/null 2>"$log"; then
		echo "[prebuild] linux-$version $variant: ready ($((SECONDS - start)) s; $(grep -c 'built in' "$log") built, else cached)" >&2
	else
		echo "[prebuild] linux-$version $variant: build FAILED after $((SECONDS - start)) s (log $log):" >&2
		tail -n 5 "$log" >&2
		status=1
	fi
done <<<"$list"
qemus=$(ci/lab/lab outer-qemus "$@") || exit 1
for version in $qemus; do
	start=$SECONDS
	log=$logs/prebuild-outer-qemu-$version.log
	if ci/lab/outer-qemu/build --qemu "$version" >/dev/null 2>"$log"; then
		echo "[prebuild] outer QEMU $version-fixed: ready ($((SECONDS - start)) s)" >&2
	else
		echo "[prebuild] outer QEMU $version-fixed: build FAILED after $((SECONDS - start)) s (log $log):" >&2
		tail -n 5 "$log" >&2
		status=1
	fi
done
exit $status
