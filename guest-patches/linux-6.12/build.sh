#!/usr/bin/env bash
# The lab's guest kernel for v6.12.y, stock or with patches/ applied; prints
# the bzImage path. The source is Debian's linux-source-6.12 unless --src or
# LINUX_SRC(_6_12)= names a kernel tree or a kernel.org tarball (see
# ../build-kernel.sh, ../README.md):
#   build.sh [--src SRC] [--dry-run] [baseline|patched|checkpatch|each|labhost]
exec "$(dirname "${BASH_SOURCE[0]}")/../build-kernel.sh" 6.12 "$@"
