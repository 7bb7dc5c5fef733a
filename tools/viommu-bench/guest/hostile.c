/*
 * viommu-hostile: one attacker of a hostile guest (the guest init's
 * lab.hostile=1, the lab's `hostile` scenario). Guest root
 * attacks the VMM through what a guest can reach while its own drivers
 * keep working:
 *
 *   viommu-hostile msix-pba      NVME_SYSFS SECONDS  read the passed-through function's MSI-X PBA
 *   viommu-hostile msix-table    NVME_SYSFS SECONDS  read its MSI-X table
 *   viommu-hostile nvme-config   NVME_SYSFS SECONDS  write its PCI config space
 *   viommu-hostile viommu-config VIOMMU_SYSFS SECONDS  flood the virtio-iommu's device config with writes
 *   viommu-hostile avail-index   VIOMMU_SYSFS SECONDS  present a corrupt avail index on its request queue
 *   viommu-hostile mem-decode    NVME_SYSFS SECONDS  turn the function's Memory Space off, touch BAR0, on again
 *   viommu-hostile activation    VIOMMU_SYSFS SECONDS  1000 resets and activations with a queue set up wrong
 *
 * SYSFS is the function's /sys/bus/pci/devices/DDDD:BB:DD.F. Each runs at
 * nice 19 for SECONDS or until SIGTERM/SIGINT, then prints one line on
 * stdout:
 *
 *   @@LAB-GUEST@@ {"event":"attack","name":..,"ok":..,"ops":N,"seconds":S,"detail":".."}
 *
 * and exits 0 (1 if it could not set its attack up: ok=false says why).
 * BARs are reached through mmap of the function's sysfs resourceN, so
 * every access is a guest MMIO access the VMM handles (the MSI-X table
 * and PBA pages and the virtio-pci registers trap; nothing is cached).
 * Only avail-index needs /dev/mem (guest RAM: the ring), so guest kernels
 * are built with CONFIG_DEVMEM=y and without CONFIG_STRICT_DEVMEM
 * (guest-patches/config-fragment).
 *
 * What each attack leaves alone, so that the guest's own fio write+verify
 * must still pass (a failure is the VMM's):
 *   - MSI-X: reads only; a write to the table would take the nvme driver's
 *     interrupts away.
 *   - nvme-config: writes every dword of the config space with the value
 *     it reads back (the command register, the MSI-X control word, status
 *     bits that clear on a 1 included), and registers whose writes do not
 *     reach the device's behaviour with other values, each restored: the
 *     BARs and the ROM BAR (sizing: emulated by the VMM, the BAR does not
 *     move), cache line size, latency timer, interrupt line, and the
 *     read-only IDs. Never a different command register (memory decode,
 *     bus mastering), MSI-X control or BIST.
 *   - viommu-config: every field of virtio_iommu_config is read-only to the
 *     driver except `bypass`, which needs VIRTIO_IOMMU_F_BYPASS_CONFIG (our
 *     device does not offer it): every write is one the device ignores.
 *   - avail-index: the request queue is the ring the device reads at each
 *     kick (the event queue is read only when a fault is pending, so a
 *     corrupt index there would go unread). The guest's driver owns the
 *     ring, so the index is corrupted and restored with compare-and-swap:
 *     I -> I + 0x8000 only if it still holds the driver's I, a kick, 2 ms,
 *     back to I only if it still holds the corrupt value (the driver never
 *     reads avail->idx, it writes its shadow copy: a request it publishes
 *     meanwhile overwrites the corrupt value, which is then consistent
 *     again), and a second kick, so a request the device left unread while
 *     the index was corrupt is taken (a corrupt index ends the device's
 *     round until the next kick). The queue is found through the
 *     transport's common config (queue_select, read back, restored).
 *     The corrupt window is a busy-wait, not a sleep, and this attacker
 *     runs SCHED_FIFO: first run in the lab, it slept 2 ms and was not
 *     scheduled again while both vCPUs spun with interrupts off (one in
 *     the driver waiting for a request the corrupt index hid, the other
 *     on the driver's lock), so the index was never restored and the
 *     guest hung itself. A FIFO task is not preempted by the guest's fio
 *     jobs, so once it has swapped the index nothing on its vCPU can
 *     take the driver's lock before it restores it.
 *   - mem-decode: run alone, before the guest's I/O (the nvme driver's
 *     doorbell writes would be dropped meanwhile): 20 cycles of Memory
 *     Space off in the command register (sysfs config), a read of BAR0's
 *     CAP and a write of its read-only VS, Memory Space on, CAP read again.
 *     The BAR is a KVM memory slot; with decode off the VMM must answer
 *     the read with all-ones (a device that does not decode) instead of
 *     failing KVM_RUN. ops: the cycles where it did and CAP came back.
 *   - activation: run last, once the guest has removed its NVMe (it resets
 *     the virtio-iommu, which drops every domain): up to 1000 cycles of
 *     status 0, ACKNOWLEDGE|DRIVER, VERSION_1, FEATURES_OK, request queue
 *     size 3 (not a power of two), its rings at address 1 (misaligned),
 *     queue enabled, DRIVER_OK. ops: the cycles the device refused with
 *     DEVICE_NEEDS_RESET; it is left reset (status 0).
 *
 * Build: gcc -static -O2 -Wall -Wextra -Werror -o viommu-hostile hostile.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
	struct timespec t = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	nanosleep(&t, NULL);
}

static const char *name;
static double started, deadline;

/* The one result line; detail must not hold quotes or backslashes. */
static int report(int ok, unsigned long long ops, const char *detail)
{
	char line[512];
	int n = snprintf(line, sizeof(line),
			 "@@LAB-GUEST@@ {\"event\":\"attack\",\"name\":\"%s\",\"ok\":%s,\"ops\":%llu,\"seconds\":%.0f,\"detail\":\"%s\"}\n",
			 name, ok ? "true" : "false", ops, now_s() - started, detail);

	if (n > 0 && write(1, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1) < 0)
		return 1;
	return ok ? 0 : 1;
}

static int fail(const char *what, const char *path)
{
	char d[300];

	snprintf(d, sizeof(d), "%s %s: %s", what, path, strerror(errno));
	return report(0, 0, d);
}

static int running(void)
{
	return !stop && now_s() < deadline;
}

/* The function's config space (as much as sysfs gives, 256 or 4096). */
static unsigned char cfg[4096];
static size_t cfg_len;

static int read_cfg(const char *dev)
{
	char p[300];
	ssize_t n;
	int fd;

	snprintf(p, sizeof(p), "%s/config", dev);
	fd = open(p, O_RDONLY);
	if (fd < 0)
		return -1;
	n = pread(fd, cfg, sizeof(cfg), 0);
	close(fd);
	if (n < 64)
		return -1;
	cfg_len = (size_t)n;
	return 0;
}

static uint32_t cfg32(size_t off)
{
	uint32_t v = 0;

	if (off + 4 <= cfg_len)
		memcpy(&v, cfg + off, 4);
	return v;
}

/* Offset of the first capability with ID id at or after the one at from
 * (0: from the list's head), 0 if none. */
static size_t find_cap(unsigned id, size_t from)
{
	size_t at = from ? cfg[from + 1] : cfg[0x34];
	int hops = 0;

	if (!(cfg[0x06] & 0x10))
		return 0;
	while (at >= 0x40 && at + 2 <= cfg_len && hops++ < 48) {
		if (cfg[at] == id)
			return at;
		at = cfg[at + 1];
	}
	return 0;
}

/* The guest-physical address and size of BAR bar of dev (line bar of
 * its sysfs resource file); 0 if it has none. */
static uint64_t bar_address(const char *dev, unsigned bar, size_t *len)
{
	unsigned long long start = 0, end = 0, flags;
	char p[300];
	unsigned i;
	FILE *f;

	snprintf(p, sizeof(p), "%s/resource", dev);
	f = fopen(p, "r");
	if (!f)
		return 0;
	for (i = 0; i <= bar; i++) {
		if (fscanf(f, "%llx %llx %llx", &start, &end, &flags) != 3) {
			start = end = 0;
			break;
		}
	}
	fclose(f);
	if (!start || end <= start)
		return 0;
	*len = (size_t)(end - start + 1);
	return start;
}

/* mmap BAR bar of dev whole: its sysfs resourceN, else /dev/mem at the
 * BAR's address. */
static volatile unsigned char *map_bar(const char *dev, unsigned bar, int writable, size_t *len)
{
	int prot = writable ? PROT_READ | PROT_WRITE : PROT_READ;
	int mode = (writable ? O_RDWR : O_RDONLY) | O_SYNC;
	uint64_t phys;
	char p[300];
	struct stat st;
	void *m;
	int fd;

	snprintf(p, sizeof(p), "%s/resource%u", dev, bar);
	fd = open(p, mode);
	if (fd >= 0) {
		if (fstat(fd, &st) == 0 && st.st_size > 0) {
			m = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
			if (m != MAP_FAILED) {
				close(fd);
				*len = (size_t)st.st_size;
				return m;
			}
		}
		close(fd);
	}
	phys = bar_address(dev, bar, len);
	if (!phys) {
		errno = ENOENT;
		return NULL;
	}
	fd = open("/dev/mem", mode);
	if (fd < 0)
		return NULL;
	m = mmap(NULL, *len, prot, MAP_SHARED, fd, (off_t)phys);
	close(fd);
	return m == MAP_FAILED ? NULL : m;
}

static uint32_t rd32(volatile unsigned char *b, size_t off)
{
	return *(volatile uint32_t *)(b + off);
}

/* ---- msix-pba, msix-table: reads of the trapped MSI-X pages. */
static int attack_msix(const char *dev, int pba)
{
	size_t cap, len, off, bytes, i;
	unsigned bar, vectors;
	volatile unsigned char *b;
	unsigned long long ops = 0;
	volatile uint32_t sink = 0;
	char d[200];
	uint32_t loc;

	if (read_cfg(dev) < 0)
		return fail("reading config of", dev);
	cap = find_cap(0x11, 0);
	if (!cap) {
		errno = ENOENT;
		return fail("no MSI-X capability in", dev);
	}
	vectors = ((cfg[cap + 2] | cfg[cap + 3] << 8) & 0x7ff) + 1;
	loc = cfg32(cap + (pba ? 8 : 4));
	bar = loc & 7;
	off = loc & ~7u;
	/* PBA: a bit per vector in qwords; table: 16 bytes per vector. */
	bytes = pba ? ((vectors + 63) / 64) * 8 : (size_t)vectors * 16;
	b = map_bar(dev, bar, 0, &len);
	if (!b)
		return fail("mapping a BAR of", dev);
	if (off + bytes > len) {
		errno = ERANGE;
		return fail("MSI-X structure past the BAR of", dev);
	}
	while (running()) {
		for (i = 0; i < bytes; i += 4) {
			sink ^= rd32(b, off + i);
			ops++;
		}
	}
	(void)sink;
	snprintf(d, sizeof(d), "BAR%u+0x%zx, %u vectors, %zu bytes per pass", bar, off, vectors, bytes);
	return report(1, ops, d);
}

/* ---- nvme-config: the passed-through function's config space. */
static int cfg_write(int fd, const void *v, size_t n, size_t off, unsigned long long *ops)
{
	if (pwrite(fd, v, n, (off_t)off) == (ssize_t)n) {
		(*ops)++;
		return 0;
	}
	return -1;
}

static int attack_nvme_config(const char *dev)
{
	static const size_t bars[] = { 0x10, 0x14, 0x18, 0x1c, 0x20, 0x24, 0x30 };
	static const size_t scratch[] = { 0x00, 0x02, 0x0c, 0x0d, 0x3c };
	unsigned long long ops = 0, failed = 0;
	size_t off, i;
	char p[300], d[200];
	uint32_t v, ones = 0xffffffff;
	uint8_t byte;
	int fd;

	snprintf(p, sizeof(p), "%s/config", dev);
	fd = open(p, O_RDWR);
	if (fd < 0 || read_cfg(dev) < 0)
		return fail("opening", p);
	while (running()) {
		/* Every dword (extended space too, if any) with its own value. */
		for (off = 0; off + 4 <= cfg_len && running(); off += 4) {
			if (pread(fd, &v, 4, (off_t)off) != 4 || cfg_write(fd, &v, 4, off, &ops) < 0)
				failed++;
		}
		/* Emulated or read-only registers with other values, restored. */
		for (i = 0; i < sizeof(bars) / sizeof(bars[0]); i++) {
			if (pread(fd, &v, 4, (off_t)bars[i]) != 4)
				continue;
			if (cfg_write(fd, &ones, 4, bars[i], &ops) < 0 ||
			    pread(fd, &ones, 4, (off_t)bars[i]) != 4 ||
			    cfg_write(fd, &v, 4, bars[i], &ops) < 0)
				failed++;
			ones = 0xffffffff;
		}
		/* The IDs (read-only: 0x00, 0x02), cache line size and latency
		 * timer (0x0c, 0x0d), interrupt line (0x3c): another value,
		 * then the old one. */
		for (i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++) {
			uint8_t other;

			if (pread(fd, &byte, 1, (off_t)scratch[i]) != 1)
				continue;
			other = (uint8_t)~byte;
			if (cfg_write(fd, &other, 1, scratch[i], &ops) < 0 ||
			    cfg_write(fd, &byte, 1, scratch[i], &ops) < 0)
				failed++;
		}
		sleep_ms(1);
	}
	close(fd);
	snprintf(d, sizeof(d), "%zu bytes of config space, %llu writes refused", cfg_len, failed);
	return report(1, ops, d);
}

/* ---- virtio-pci structures (vendor capabilities, ID 0x09). */
struct vcap {
	unsigned bar;
	uint32_t off, len, mult;
};

static int find_vcap(unsigned type, struct vcap *c)
{
	size_t at = 0;

	while ((at = find_cap(0x09, at)) != 0) {
		if (cfg[at + 3] == type) {
			c->bar = cfg[at + 4];
			c->off = cfg32(at + 8);
			c->len = cfg32(at + 12);
			c->mult = type == 2 ? cfg32(at + 16) : 0;
			return 0;
		}
	}
	errno = ENOENT;
	return -1;
}

/* ---- viommu-config: writes to the device-specific config region. */
static int attack_viommu_config(const char *dev)
{
	/* virtio_iommu_config: page_size_mask (0, u64), input_range (8, 16),
	 * domain_range (24, 28), probe_size (32), bypass (36, u8). */
	static const unsigned char vals[] = { 0, 1, 0xff };
	unsigned long long ops = 0;
	volatile unsigned char *b, *c;
	struct vcap dc;
	size_t len, off, span;
	unsigned k = 0;
	char d[200];

	if (read_cfg(dev) < 0)
		return fail("reading config of", dev);
	if (find_vcap(4, &dc) < 0)
		return fail("no virtio device config capability in", dev);
	b = map_bar(dev, dc.bar, 1, &len);
	if (!b)
		return fail("mapping a BAR of", dev);
	if ((size_t)dc.off + dc.len > len || dc.len < 40) {
		errno = ERANGE;
		return fail("device config region outside the BAR of", dev);
	}
	c = b + dc.off;
	span = dc.len < 64 ? dc.len : 64;
	while (running()) {
		for (off = 0; off + 8 <= span; off += 8, k++) {
			/* the same value, another value, and every access size */
			uint64_t cur = *(volatile uint64_t *)(c + off);

			*(volatile uint64_t *)(c + off) = cur;
			*(volatile uint64_t *)(c + off) = ~cur;
			*(volatile uint32_t *)(c + off + 4) = (uint32_t)k;
			*(volatile uint16_t *)(c + off + 2) = (uint16_t)k;
			*(volatile uint8_t *)(c + off + 1) = (uint8_t)k;
			ops += 5;
		}
		/* bypass: on, off, invalid */
		*(volatile uint8_t *)(c + 36) = vals[k % 3];
		ops++;
	}
	snprintf(d, sizeof(d), "BAR%u+0x%x, %u bytes", dc.bar, dc.off, dc.len);
	return report(1, ops, d);
}

/* ---- avail-index: a corrupt avail index on the request queue. */
static int attack_avail_index(const char *dev)
{
	unsigned long long corrupted = 0, restored = 0, overwritten = 0, busy = 0;
	volatile unsigned char *cb, *nb;
	struct vcap cc, nc;
	size_t clen, nlen, page, in_page, maplen;
	uint16_t sel, qsize, notify_off;
	uint64_t avail;
	unsigned char *m;
	uint16_t *idx;
	char d[300];
	int fd;

	if (read_cfg(dev) < 0)
		return fail("reading config of", dev);
	if (find_vcap(1, &cc) < 0 || find_vcap(2, &nc) < 0)
		return fail("no virtio common or notify capability in", dev);
	cb = map_bar(dev, cc.bar, 1, &clen);
	if (!cb)
		return fail("mapping a BAR of", dev);
	nb = nc.bar == cc.bar ? cb : map_bar(dev, nc.bar, 1, &nlen);
	if (nc.bar == cc.bar)
		nlen = clen;
	if (!nb)
		return fail("mapping a BAR of", dev);
	if ((size_t)cc.off + 0x38 > clen) {
		errno = ERANGE;
		return fail("common config outside the BAR of", dev);
	}
	/* queue 0 (requests): size, notify offset, driver area (avail ring) */
	sel = *(volatile uint16_t *)(cb + cc.off + 0x16);
	*(volatile uint16_t *)(cb + cc.off + 0x16) = 0;
	qsize = *(volatile uint16_t *)(cb + cc.off + 0x18);
	notify_off = *(volatile uint16_t *)(cb + cc.off + 0x1e);
	avail = *(volatile uint32_t *)(cb + cc.off + 0x28) |
		(uint64_t) * (volatile uint32_t *)(cb + cc.off + 0x2c) << 32;
	*(volatile uint16_t *)(cb + cc.off + 0x16) = sel;
	volatile uint16_t *kick = (volatile uint16_t *)(nb + nc.off + (size_t)notify_off * nc.mult);
	if ((size_t)((volatile unsigned char *)kick - nb) + 2 > nlen || !avail || !qsize) {
		errno = ERANGE;
		return fail("no usable request queue on", dev);
	}
	fd = open("/dev/mem", O_RDWR);
	if (fd < 0)
		return fail("opening", "/dev/mem (CONFIG_DEVMEM, no CONFIG_STRICT_DEVMEM)");
	page = (size_t)(avail & ~4095ull);
	in_page = (size_t)(avail & 4095);
	maplen = in_page + 4 > 4096 ? 8192 : 4096;
	m = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)page);
	close(fd);
	if (m == MAP_FAILED)
		return fail("mapping the avail ring through", "/dev/mem");
	idx = (uint16_t *)(m + in_page + 2);
	{
		struct sched_param sp = { .sched_priority = 50 };

		if (sched_setscheduler(0, SCHED_FIFO, &sp))
			return fail("making the avail-index attacker SCHED_FIFO", "sched_setscheduler");
	}
	while (running()) {
		uint16_t good = __atomic_load_n(idx, __ATOMIC_ACQUIRE);
		uint16_t bad = (uint16_t)(good + 0x8000);
		uint16_t expect = good;

		if (__atomic_compare_exchange_n(idx, &expect, bad, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			double until = now_s() + 0.0005;

			corrupted++;
			*kick = 0;
			while (now_s() < until)
				__builtin_ia32_pause();
			expect = bad;
			if (__atomic_compare_exchange_n(idx, &expect, good, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
				restored++;
			else
				overwritten++;
			*kick = 0;
		} else {
			busy++;
		}
		sleep_ms(20);
	}
	snprintf(d, sizeof(d),
		 "request queue avail ring at 0x%llx (size %u), %llu restored, %llu overwritten by the driver, %llu skipped (driver busy)",
		 (unsigned long long)avail, qsize, restored, overwritten, busy);
	return report(1, corrupted, d);
}

/* ---- mem-decode: Memory Space off under a BAR that is a memory slot. */
static int attack_mem_decode(const char *dev)
{
	unsigned long long good = 0, not_ones = 0, not_back = 0, cycles = 0;
	volatile unsigned char *b;
	uint16_t cmd, off_cmd;
	uint32_t cap, vs, v;
	char p[300], d[300];
	size_t len;
	int fd;

	snprintf(p, sizeof(p), "%s/config", dev);
	fd = open(p, O_RDWR);
	if (fd < 0)
		return fail("opening", p);
	if (pread(fd, &cmd, 2, 4) != 2 || !(cmd & 2)) {
		close(fd);
		errno = EINVAL;
		return fail("Memory Space is not on in the command register of", dev);
	}
	b = map_bar(dev, 0, 1, &len);
	if (!b || len < 16) {
		close(fd);
		return fail("mapping BAR0 of", dev);
	}
	cap = rd32(b, 0);
	vs = rd32(b, 8);
	off_cmd = (uint16_t)(cmd & ~2u);
	while (cycles < 20 && running()) {
		cycles++;
		if (pwrite(fd, &off_cmd, 2, 4) != 2)
			break;
		v = rd32(b, 0);
		*(volatile uint32_t *)(b + 8) = vs;
		if (v != 0xffffffffu)
			not_ones++;
		if (pwrite(fd, &cmd, 2, 4) != 2)
			break;
		if (rd32(b, 0) != cap) {
			not_back++;
			continue;
		}
		if (v == 0xffffffffu)
			good++;
	}
	/* Whatever happened, Memory Space ends on. */
	if (pwrite(fd, &cmd, 2, 4) != 2) {
		close(fd);
		return fail("turning Memory Space back on in", p);
	}
	close(fd);
	snprintf(d, sizeof(d),
		 "%llu cycles, %llu reads with decode off not all-ones, %llu times CAP 0x%x did not come back",
		 cycles, not_ones, not_back, cap);
	return report(1, good, d);
}

/* ---- activation: a reset and an activation with a queue set up wrong. */
static int attack_activation(const char *dev)
{
	unsigned long long refused = 0, accepted = 0, cycles = 0, stuck = 0;
	volatile unsigned char *b, *c;
	struct vcap cc;
	size_t len;
	char d[300];
	int i;

	if (read_cfg(dev) < 0)
		return fail("reading config of", dev);
	if (find_vcap(1, &cc) < 0)
		return fail("no virtio common config capability in", dev);
	b = map_bar(dev, cc.bar, 1, &len);
	if (!b)
		return fail("mapping a BAR of", dev);
	if ((size_t)cc.off + 0x38 > len) {
		errno = ERANGE;
		return fail("common config outside the BAR of", dev);
	}
	c = b + cc.off;
#define STATUS (*(volatile uint8_t *)(c + 0x14))
	while (cycles < 1000 && running()) {
		cycles++;
		STATUS = 0;
		/* A reset may wait for the device thread (its unmaps): reads
		 * first, then 1 ms naps, 2 s in all. */
		for (i = 0; i < 3000 && STATUS != 0; i++)
			if (i >= 1000)
				sleep_ms(1);
		if (STATUS != 0) {
			stuck++;
			continue;
		}
		STATUS = 1 | 2; /* ACKNOWLEDGE | DRIVER */
		*(volatile uint32_t *)(c + 0x08) = 1; /* driver_feature_select: 32-63 */
		*(volatile uint32_t *)(c + 0x0c) = 1; /* VIRTIO_F_VERSION_1 */
		STATUS = 1 | 2 | 8; /* FEATURES_OK */
		*(volatile uint16_t *)(c + 0x16) = 0; /* queue_select: requests */
		*(volatile uint16_t *)(c + 0x18) = 3; /* queue_size */
		*(volatile uint32_t *)(c + 0x20) = 1; /* queue_desc */
		*(volatile uint32_t *)(c + 0x24) = 0;
		*(volatile uint32_t *)(c + 0x28) = 1; /* queue_driver */
		*(volatile uint32_t *)(c + 0x2c) = 0;
		*(volatile uint32_t *)(c + 0x30) = 1; /* queue_device */
		*(volatile uint32_t *)(c + 0x34) = 0;
		*(volatile uint16_t *)(c + 0x1c) = 1; /* queue_enable */
		STATUS = 1 | 2 | 8 | 4; /* DRIVER_OK */
		if (STATUS & 0x40) /* DEVICE_NEEDS_RESET */
			refused++;
		else
			accepted++;
	}
	STATUS = 0;
#undef STATUS
	snprintf(d, sizeof(d),
		 "BAR%u+0x%x: %llu cycles, %llu refused with DEVICE_NEEDS_RESET, %llu accepted, %llu resets not done",
		 cc.bar, cc.off, cycles, refused, accepted, stuck);
	return report(1, refused, d);
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	long secs;

	if (argc != 4 || (secs = strtol(argv[3], NULL, 10)) <= 0) {
		fprintf(stderr, "usage: viommu-hostile msix-pba|msix-table|nvme-config|viommu-config|avail-index|mem-decode|activation SYSFS_DEVICE SECONDS\n");
		return 2;
	}
	name = argv[1];
	/* The attackers take what the guest's own I/O leaves (nice 19). */
	(void)setpriority(PRIO_PROCESS, 0, 19);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	started = now_s();
	deadline = started + (double)secs;
	if (!strcmp(name, "msix-pba"))
		return attack_msix(argv[2], 1);
	if (!strcmp(name, "msix-table"))
		return attack_msix(argv[2], 0);
	if (!strcmp(name, "nvme-config"))
		return attack_nvme_config(argv[2]);
	if (!strcmp(name, "viommu-config"))
		return attack_viommu_config(argv[2]);
	if (!strcmp(name, "avail-index"))
		return attack_avail_index(argv[2]);
	if (!strcmp(name, "mem-decode"))
		return attack_mem_decode(argv[2]);
	if (!strcmp(name, "activation"))
		return attack_activation(argv[2]);
	fprintf(stderr, "viommu-hostile: no attack %s\n", name);
	return 2;
}
