#!/usr/bin/env bash
# The main job: install what is needed, then the lab demo: Debian 13's own
# kernel behind stock QEMU's VT-d (the baseline) and behind our VMM, then
# stock QEMU's virtio-iommu and our VMM with stock and patched 6.12 guests,
# vs no vIOMMU, NVMe passthrough, fio at 4k and 128k with 1 and 2 jobs on
# 2-vCPU guests, 3 rounds (one lab host boot each, columns in balanced
# order), run by viommu-bench inside the lab host. Prints progress, then
# the table (medians and paired 95% intervals over the rounds, p99); the
# JSON, table and chart stay in the results directory it names at the end.
# Arguments go to `ci/lab/lab demo` (--out DIR, --runtime S, --rounds N,
# --bs, --numjobs, --save for a copy among the committed results).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh >/dev/null
exec ci/lab/lab demo "$@"
