#!/usr/bin/env bash
# The lab's guest kernel from Debian's linux-source-6.1, stock or with
# patches/ applied; prints the bzImage path (see ../build-kernel.sh):
#   build.sh [baseline|patched|checkpatch|each]
exec "$(dirname "${BASH_SOURCE[0]}")/../build-kernel.sh" 6.1 "$@"
