#!/usr/bin/env bash
# The lab's guest kernel for v6.1.y, stock or with patches/ applied (and the
# lab host's own kernel, labhost); prints the bzImage path. The source is
# Debian's linux-source-6.1 unless --src or LINUX_SRC(_6_1)= names a kernel
# tree or a kernel.org tarball (see ../build-kernel.sh, ../README.md):
#   build.sh [--src SRC] [--dry-run] [baseline|patched|checkpatch|each|labhost]
exec "$(dirname "${BASH_SOURCE[0]}")/../build-kernel.sh" 6.1 "$@"
