#!/usr/bin/env bash
# The lab's guest kernel for v7.3.y, stock or with patches/ applied; prints
# the bzImage path. The source is Debian's linux-source-7.3 (from
# trixie-backports: ../fetch-debian-source.sh 7.3 fetches it into the cache)
# unless --src or LINUX_SRC(_7_3)= names a kernel tree or a kernel.org
# tarball (see ../build-kernel.sh, ../README.md):
#   build.sh [--src SRC] [--dry-run] [baseline|patched|checkpatch|each]
exec "$(dirname "${BASH_SOURCE[0]}")/../build-kernel.sh" 7.3 "$@"
