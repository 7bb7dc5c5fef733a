# Scenario: viommu-bench on a Debian 13 userland. The lab host
# holds a Debian 13 root at /lab/debian13 (build-image.sh --userland: fio,
# busybox-static and QEMU 11.1 or 10.0 from Debian 13, with its own glibc,
# ldd and libraries). This script chroots into it, with the lab host's
# /proc, /sys, /dev, /dev/shm and /tmp and the lab's /lab/bin (our
# viommu-bench and vmm, built on Debian 12) and /lab/guest (guest kernels)
# bound in, and runs the bench tool there as a user of such a host would:
# no --initramfs, so the tool builds its guest image from Debian 13's fio
# and busybox (the libraries its ldd lists), and stock QEMU is Debian 13's
# (found on PATH). Then it checks where what ran came from: the image's
# fio, busybox and libc are the root's files, the guests' own fio and
# busybox say the root's versions, and the stock column's QEMU is the
# root's (lab.userland=VERSION: 11.1 or 10.0).

check() { lab_check "$@"; } # NAME OK DETAIL (host-lib.sh)
yes_no() { if eval "$1"; then echo true; else echo false; fi; }
# in_root /PATH ARGS...: a program of the root. Always by its absolute path:
# the lab host's busybox runs its own applets for bare names it knows
# (chroot DIR busybox, chroot DIR sh would be the lab host's, Debian 12's).
in_root() { chroot "$R" "$@"; }
R=/lab/debian13
want_qemu=$(lab_arg userland 11.1)
status=0

# 1. The root, with the lab host's file systems and the lab's programs.
[ -x "$R/usr/bin/fio" ] || { check userland false "no Debian 13 root at $R (build-image.sh --userland)"; return 1; }
for d in proc sys dev dev/shm tmp lab/bin lab/guest; do mkdir -p "$R/$d"; done
mount -t proc proc "$R/proc" &&
	mount -o bind /sys "$R/sys" &&
	mount -o bind /dev "$R/dev" &&
	mount -o bind /dev/shm "$R/dev/shm" &&
	mount -o bind /tmp "$R/tmp" &&
	mount -o bind /lab/bin "$R/lab/bin" &&
	mount -o bind /lab/guest "$R/lab/guest" ||
	{ check userland false "binding the lab host's file systems into $R failed"; return 1; }
os=$(in_root /bin/sh -c '. /etc/os-release && echo "$PRETTY_NAME ($(cat /etc/debian_version))"')
fio_ver=$(in_root /usr/bin/fio --version 2>&1 | head -n 1)
fio_pkg=$(in_root /usr/bin/dpkg-query -W -f '${Package} ${Version}' fio 2>&1)
bb_ver=$(in_root /usr/bin/busybox 2>&1 | sed -n '1s/^BusyBox \(.*\) multi-call binary.*/\1/p')
qemu_ver=$(in_root /usr/bin/qemu-system-x86_64 --version 2>&1 | head -n 1)
libc=$(in_root /usr/bin/ldd --version 2>&1 | head -n 1)
# What the tool will find on PATH there (the root's dash: command -v).
progs=$(in_root /bin/sh -c 'for p in fio busybox ldd qemu-system-x86_64 viommu-bench vmm; do command -v $p; done' | tr '\n' ' ')
os_id=$(in_root /bin/sh -c '. /etc/os-release && echo "$ID $VERSION_ID"')
check userland "$(yes_no '[ "$os_id" = "debian 13" ] && [ -n "$fio_ver" ] && [ -n "$bb_ver" ] && printf "%s" "$qemu_ver" | grep -q "version $want_qemu\."')" \
	"$os; $fio_ver ($fio_pkg); busybox $bb_ver; $qemu_ver; $libc; on PATH: $progs" || status=1

# 2. The run, in the root: the tool builds its own guest image (no
# --initramfs) in /tmp/bench-cache; its output goes on to the console as
# it comes (the guests' progress, the cells).
bench_args | without_flag --initramfs >/tmp/bench.args
IFS='
'
# shellcheck disable=SC2046
{
	chroot "$R" /lab/bin/viommu-bench $(cat /tmp/bench.args)
	echo $? >/tmp/userland.rc
} 2>&1 | tee /tmp/userland.out
unset IFS
rc=$(cat /tmp/userland.rc)
check bench-run "$(yes_no '[ "$rc" = 0 ]')" "viommu-bench in the Debian 13 root exit $rc" || status=1

# 3. The image the tool built holds the root's fio, busybox and libc.
image=$(ls /tmp/bench-cache/initramfs-*.cpio 2>/dev/null)
rm -rf /tmp/image && mkdir -p /tmp/image
[ "$(echo "$image" | grep -c .)" = 1 ] && (cd /tmp/image && cpio -id usr/bin/fio bin/busybox lib/x86_64-linux-gnu/libc.so.6 <"$image" 2>/dev/null)
same() { [ -f "/tmp/image/$1" ] && cmp -s "/tmp/image/$1" "$R/$2"; }
check image-from-userland "$(yes_no 'same usr/bin/fio usr/bin/fio && same bin/busybox usr/bin/busybox && same lib/x86_64-linux-gnu/libc.so.6 usr/lib/x86_64-linux-gnu/libc.so.6 && grep -q "guest image: built $image" /tmp/userland.out')" \
	"image ${image:-none} ($(wc -c <"${image:-/dev/null}") bytes); fio $(same usr/bin/fio usr/bin/fio && echo is || echo is NOT) the root's, busybox $(same bin/busybox usr/bin/busybox && echo is || echo is NOT), libc $(same lib/x86_64-linux-gnu/libc.so.6 usr/lib/x86_64-linux-gnu/libc.so.6 && echo is || echo is NOT)" || status=1

# 4. Every guest ran that fio and busybox (its boot record says so).
cells=$(grep -c '@@LAB-CELL@@' /tmp/userland.out)
# field NAME: the distinct values of NAME in the cells' boot records, with
# how many cells said each ("fio-3.39 x2").
field() {
	grep '@@LAB-CELL@@' /tmp/userland.out | grep -o "\"$1\":\"[^\"]*\"" | sed "s/^\"$1\":\"//; s/\"\$//" |
		sort | uniq -c | awk '{ c = $1; $1 = ""; printf "%s%s x%s", (n++ ? ", " : ""), substr($0, 2), c }'
}
fios=$(field fio)
bbs=$(field busybox)
check guest-programs "$(yes_no '[ "$cells" -gt 0 ] && [ "$(grep "@@LAB-CELL@@" /tmp/userland.out | grep -cF "\"fio\":\"$fio_ver\"")" = "$cells" ] && [ "$(grep "@@LAB-CELL@@" /tmp/userland.out | grep -cF "\"busybox\":\"$bb_ver\"")" = "$cells" ]')" \
	"$cells guest(s); their fio: ${fios:-none}; their busybox: ${bbs:-none}; the root's: $fio_ver, $bb_ver" || status=1

# 5. The stock column ran the root's QEMU (the tool records its version).
recorded=$(grep -o '"qemu_version": *"[^"]*"' /tmp/bench/results.json 2>/dev/null | sed 's/.*: *"//; s/"$//')
check stock-qemu "$(yes_no '[ -n "$recorded" ] && [ "$recorded" = "$qemu_ver" ]')" \
	"results.json: ${recorded:-no qemu_version}; the root's: $qemu_ver (want $want_qemu)" || status=1

for d in lab/guest lab/bin tmp dev/shm dev sys proc; do umount "$R/$d"; done
return $status
