#!/usr/bin/env bash
# All tests: formatting, lints, unit/property tests (the bench tool's too),
# the fuzz targets for a bounded time, and the lab steps (real guests behind
# virtio-iommu with VFIO passthrough of an NVMe, data verified, run by the
# bench tool inside the lab host). The README's test command.
#
#   ci/test.sh [--no-lab]     FUZZ_SECONDS=N sets the fuzzing time per target (default 20: a smoke
#                           test; long runs are fuzz/run.sh, see README)
set -uo pipefail
cd "$(dirname "$0")/.."
lab=1
[ "${1:-}" = --no-lab ] && lab=0

bash ci/install-deps.sh || exit 1

if [ $lab = 1 ]; then
	# The patched guest of CI's smoke steps is 6.12, the maintained LTS
	# series (smp-smoke and smp-smoke-1qp: strict and lazy, pool off and
	# on, reuse cache off and on; vmm-exits); the patched guest behind
	# stock QEMU at every size is smoke-6.12-ci's first column. The stock
	# guest is stock 6.12 (ci/lab/labkit/presets.py's STOCK). So CI boots 6.12 guests
	# only and builds three kernels (stock and patched 6.12, our 6.12 lab
	# host for iommufd; about 5 min each from scratch on 2 idle cores,
	# built in that order in the background by ci/prebuild-kernels.sh, the
	# steps ordered by the kernel they need). The other series are checked
	# by checkpatch here and booted by hand: the frozen 6.1
	# (patched-smoke, lazy-smoke, compare-6.1) and the mainline-facing 7.3
	# (smoke-7.3-ci). With 6.1 and 7.3 built too a cold run on 2 cores
	# took well over the hour CI should take (docs/testing.md). CI's minutes go to
	# 6.12's reuse cache (smoke-6.12-ci, without its lazy guest that has
	# the cache off; vmm-smoke's guest, ours + stock, is hostile's calm
	# twin). distro-smoke boots Debian 13's own kernel package (no build)
	# behind our virtio-iommu with its modules loaded by the guest image;
	# vtd-smoke puts stock QEMU's emulated VT-d (caching mode) in front of
	# the stock, the patched and Debian's 6.12 kernels (the demo's
	# baseline) and checks each ran strict behind dmar0.
	lab_steps=(
		vfio-backend vmm-errors
		smoke bench-tool restore multipath hostile
		smoke-6.12-ci smp-smoke icount-smoke smp-smoke-1qp vmm-exits
		iommufd distro-smoke vtd-smoke
	)
fi
# Every kernel the lab steps boot is built ahead, one after another, at
# the lowest CPU priority, beside the cargo, fuzz and checkpatch steps
# (ci/prebuild-kernels.sh), and the lab steps start once all are built:
# a lab step beside a kernel build runs up to twice as long, and the
# build, starved by the lab's emulation, then sets the end of a cold run.
# Alone on a quiet 2-core machine they build in 502 s (stock), 176 s
# (patched, most objects from ccache) and 572 s (our lab host);
# docs/testing.md has the measurements.
#
# The build runs in a session of its own (setsid: the trap below kills all
# of it), and with the scheduler's autogroups on (Debian's default,
# kernel.sched_autogroup_enabled=1, wherever the CPU cgroup is the root's)
# a new session is a new autogroup that gets as much CPU as this whole
# script's, whatever its tasks' nice: nice only orders tasks inside one
# autogroup. So the build's autogroup itself is set to nice 19. On this
# 2-core machine two nice-0 busy loops took 2.3 s alone, 2.2 s beside two
# nice-19 busy loops in this session, 4.2 s beside them in a session of
# their own, 2.3 s once that session's autogroup was at 19
# (ci/cpu-share-check.sh); without it a cold run's cargo steps took twice
# their warm time.
prebuild=
if [ $lab = 1 ]; then
	mkdir -p target
	setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null; exec nice -n 19 ci/prebuild-kernels.sh "$@"' \
		prebuild "${lab_steps[@]}" 2>target/prebuild.log &
	prebuild=$!
	trap '[ -z "$prebuild" ] || kill -- -"$prebuild" 2>/dev/null' EXIT
fi

# The background build's own result and its lines (a kernel's time, or
# its failure and log), once it is done.
prebuild_done() {
	local rc=0
	wait "$prebuild" || rc=$?
	prebuild=
	cat target/prebuild.log >&2
	return $rc
}

passed=0 failed=0 failures=()
step() {
	local name=$1 start=$SECONDS
	shift
	echo "==== $name" >&2
	if "$@"; then
		passed=$((passed + 1))
		echo "==== $name: ok ($((SECONDS - start)) s)" >&2
	else
		failed=$((failed + 1))
		failures+=("$name")
		echo "==== $name: FAILED ($((SECONDS - start)) s)" >&2
	fi
}

step "cargo fmt" cargo fmt --all -- --check
step "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
step "cargo test" cargo test --workspace --locked
[ -x fuzz/run.sh ] && step "fuzz" fuzz/run.sh "${FUZZ_SECONDS:-20}"
step "guest patches 6.1 checkpatch --strict" guest-patches/linux-6.1/build.sh checkpatch
step "guest patches 6.12 checkpatch --strict" guest-patches/linux-6.12/build.sh checkpatch
# The mainline-facing series: Debian's linux-source-7.3 (trixie-backports,
# about 150 MB, fetched once into the cache without touching the system's
# apt) for its checkpatch.pl; its lab smoke, `lab smoke-7.3-ci`, runs by hand.
step "guest patches 7.3 checkpatch --strict" bash -c 'guest-patches/fetch-debian-source.sh 7.3 && guest-patches/linux-7.3/build.sh checkpatch'
step "lab scripts" bash -c 'for f in ci/lab/*.sh ci/*.sh guest-patches/*.sh guest-patches/linux-*/build.sh; do bash -n "$f" || exit 1; done; gcc -static -O2 -Wall -Wextra -Werror -o /dev/null tools/viommu-bench/guest/hostile.c || exit 1; gcc -static-pie -O2 -Wall -Wextra -Werror -o /dev/null ci/lab/repro/tcg-race.c || exit 1; gcc -static-pie -O2 -Wall -Wextra -Werror -o /dev/null ci/lab/helpers/hold-excl.c || exit 1; gcc -static-pie -O2 -Wall -Wextra -Werror -o /dev/null ci/lab/helpers/speed-probe.c || exit 1; for f in tools/viommu-bench/guest/init ci/lab/host-init ci/lab/host-lib.sh ci/lab/scenarios/*.sh; do busybox sh -n "$f" || exit 1; done; python3 -m unittest discover -s ci/lab/tests -t ci/lab -q'
step "guest kernel sources and build tools (no build)" guest-patches/test-build-kernel.sh
if [ $lab = 1 ]; then
	# No lab step runs beside a kernel build (the comment on the build
	# above says why).
	step "guest kernels built ahead (ci/prebuild-kernels.sh)" prebuild_done
	mkdir -p target
	for s in "${lab_steps[@]}"; do
		step "lab $s" ci/lab/lab run "$s" --results "target/lab-$s.json"
	done
fi

[ $failed -eq 0 ] || echo "failed: ${failures[*]}" >&2
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
