#!/usr/bin/env bash
# Debian's linux-source-6.12 for the lab guest, with or without this
# series (../build-kernel.sh does the work, for every version):
#   build.sh [baseline|patched|checkpatch|each]
exec "$(dirname "${BASH_SOURCE[0]}")/../build-kernel.sh" 6.12 "$@"
