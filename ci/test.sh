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
# apt) for its checkpatch.pl; its lab smoke is `lab smoke-7.3-ci` below.
step "guest patches 7.3 checkpatch --strict" bash -c 'guest-patches/fetch-debian-source.sh 7.3 && guest-patches/linux-7.3/build.sh checkpatch'
step "lab scripts" bash -c 'for f in ci/lab/*.sh ci/*.sh guest-patches/*.sh guest-patches/linux-*/build.sh; do bash -n "$f" || exit 1; done; gcc -static -O2 -Wall -Wextra -Werror -o /dev/null benches/bench-tool/guest/hostile.c || exit 1; for f in benches/bench-tool/guest/init ci/lab/host-init ci/lab/host-lib.sh ci/lab/scenarios/*.sh; do busybox sh -n "$f" || exit 1; done; python3 -m unittest discover -s ci/lab -p "test_*.py" -q'
step "guest kernel sources and build tools (no build)" guest-patches/test-build-kernel.sh
if [ $lab = 1 ]; then
	# The 6.1 series is frozen (guest-patches/README.md): CI keeps it as a
	# smoke test (patched-smoke; strict and lazy, pool off and on, in
	# smp-smoke and smp-smoke-1qp). Its reuse cache (lazy-smoke) runs by
	# hand: CI's minutes go to the maintained series' caches instead
	# (smoke-6.12, smoke-7.3-ci).
	mkdir -p target
	step "lab smoke" ci/lab/lab run smoke --results target/lab-smoke.json
	step "lab vfio-backend" ci/lab/lab run vfio-backend --results target/lab-vfio-backend.json
	step "lab iommufd" ci/lab/lab run iommufd --results target/lab-iommufd.json
	step "lab patched-smoke" ci/lab/lab run patched-smoke --results target/lab-patched-smoke.json
	step "lab vmm-smoke" ci/lab/lab run vmm-smoke --results target/lab-vmm-smoke.json
	step "lab vmm-errors" ci/lab/lab run vmm-errors --results target/lab-vmm-errors.json
	step "lab smp-smoke" ci/lab/lab run smp-smoke --results target/lab-smp-smoke.json
	step "lab smp-smoke-1qp" ci/lab/lab run smp-smoke-1qp --results target/lab-smp-smoke-1qp.json
	step "lab hostile" ci/lab/lab run hostile --results target/lab-hostile.json
	step "lab vmm-exits" ci/lab/lab run vmm-exits --results target/lab-vmm-exits.json
	step "lab smoke-6.12" ci/lab/lab run smoke-6.12 --results target/lab-smoke-6.12.json
	# The patched 7.3 guest only (one 7.3 kernel to build, 8-13 min cold).
	step "lab smoke-7.3-ci" ci/lab/lab run smoke-7.3-ci --results target/lab-smoke-7.3-ci.json
	step "lab bench-tool" ci/lab/lab run bench-tool --results target/lab-bench-tool.json
	step "lab multipath" ci/lab/lab run multipath --results target/lab-multipath.json
fi

[ $failed -eq 0 ] || echo "failed: ${failures[*]}" >&2
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
