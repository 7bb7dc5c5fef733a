#!/usr/bin/env bash
# Build the lab's guest (L3) kernel from Debian's linux-source-6.12, with or
# without the series in patches/ (see ../build-kernel.sh, shared with the
# other versions):
#
#   build.sh [baseline|patched]     prints the path of the cached bzImage
#   build.sh checkpatch             scripts/checkpatch.pl --strict on the series
#   build.sh each                   build after each patch of the series
exec "$(dirname "${BASH_SOURCE[0]}")/../build-kernel.sh" 6.12 "$@"
