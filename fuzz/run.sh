#!/usr/bin/env bash
# Runs every cargo-fuzz target of this directory for a bounded time.
#   fuzz/run.sh <seconds per target>
# The committed seed corpus (corpus/<target>/) is read, never written: new
# inputs go to a temporary directory. A crash fails the script and leaves
# the reproducer under fuzz/artifacts/<target>/.
set -euo pipefail
secs="${1:?usage: fuzz/run.sh <seconds per target>}"
cd "$(dirname "$0")"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
for target in $(cargo +nightly fuzz list); do
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    echo "fuzzing $target for ${secs}s"
    cargo +nightly fuzz run "$target" "$work" "corpus/$target" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
    rm -rf "$work"
    trap - EXIT
done
