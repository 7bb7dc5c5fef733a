#!/usr/bin/env bash
# The main job: install what is needed, then the lab demo (stock QEMU and our
# VMM, stock and patched guests, NVMe passthrough, fio) printed as a table.
# Arguments go to `ci/lab/lab demo` (e.g. --save for results + PNG chart
# under benches/results/, --chart FILE.png, --runtime 8).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
exec ci/lab/lab demo "$@"
