/*
 * speed-probe: how fast this machine runs, sampled at a fixed rate, for
 * setting beside a lab run (docs/lab.md, "How precise the lab is";
 * ci/lab/probe-vs-phase sets the samples beside each timed phase).
 *
 * Two gauges, one per run of the probe:
 * - cpu (the default), once a second: a fixed piece of integer work in
 *   a 16 KiB array (about 0.9 ms on the lab's machine). It moves only
 *   when the CPU itself runs slower, e.g. with a busy SMT sibling on the
 *   real host under a VM, which steal time does not show. About 0.1% of
 *   one CPU.
 * - mem, every 2 s: 50000 steps of a pointer chase through a 256 MiB
 *   buffer, one step per 4 KiB page in random order (at a varying offset
 *   in the page), so each step misses the caches and the TLBs of this
 *   machine and of the host under it: what a memory-bound emulator pays
 *   for a miss. About 10-25 ms a sample, 0.5-1% of one CPU.
 *
 * Each line: the CLOCK_MONOTONIC time the sample began (seconds), the
 * thread CPU time the work took, and its wall time (cpu: µs for the
 * whole piece; mem: ns per step). The CPU time leaves out the time the
 * probe waited for a CPU, so a busy machine does not inflate it.
 *
 * Usage: speed-probe [cpu|mem] > probe.txt &  (stop with kill)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MEM_BYTES (256u << 20)
#define PAGE 4096u
#define MEM_STEPS 50000

static double now(clockid_t clock)
{
	struct timespec t;

	clock_gettime(clock, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void sample(double w0, double c0, double scale)
{
	double c1 = now(CLOCK_THREAD_CPUTIME_ID), w1 = now(CLOCK_MONOTONIC);

	printf("%.3f %.1f %.1f\n", w0, (c1 - c0) * scale, (w1 - w0) * scale);
}

static int cpu_gauge(void)
{
	static uint32_t a[4096];
	uint32_t x;

	for (int i = 0; i < 4096; i++)
		a[i] = i * 2654435761u;
	for (;;) {
		double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);

		x = 1;
		for (int r = 0; r < 200; r++)
			for (int i = 0; i < 4096; i++) {
				x = x * 1664525u + a[i];
				a[i] ^= x >> 7;
			}
		/* x feeds a[], so the work cannot be optimised away. */
		sample(w0, c0, 1e6);
		if (usleep(1000000) != 0)
			return 1;
	}
}

/* xorshift64: a fixed shuffle, the same chain in every run. */
static uint64_t next_random(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Where the chain's step I lives: a page in the shuffled order, at one of
 * 63 cache lines in it (so the steps do not all share a cache set). */
static char *step_at(char *buf, const uint32_t *order, size_t i, size_t n)
{
	i %= n;
	return buf + (size_t)order[i] * PAGE + (i % 63) * 64;
}

static int mem_gauge(void)
{
	size_t n = MEM_BYTES / PAGE;
	uint64_t seed = 88172645463325252ull;
	uint32_t *order = malloc(n * sizeof(*order));
	char *buf = mmap(NULL, MEM_BYTES, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char **p;

	if (!order || buf == MAP_FAILED) {
		perror("speed-probe: 256 MiB for the mem gauge");
		return 1;
	}
	/* Huge pages where the kernel allows: the misses are then the host's
	 * and the caches', not this machine's own page walks. */
	madvise(buf, MEM_BYTES, MADV_HUGEPAGE);
	memset(buf, 1, MEM_BYTES);
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = next_random(&seed) % (i + 1);
		uint32_t t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (size_t i = 0; i < n; i++)
		*(char **)step_at(buf, order, i, n) = step_at(buf, order, i + 1, n);
	p = (char **)step_at(buf, order, 0, n);
	for (;;) {
		double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);

		for (int i = 0; i < MEM_STEPS; i++)
			p = (char **)*p;
		/* p is the chain's next step, never NULL: keeps the loads. */
		if (!p)
			return 1;
		sample(w0, c0, 1e9 / MEM_STEPS);
		if (usleep(2000000) != 0)
			return 1;
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2 || !strcmp(argv[1], "cpu"))
		return cpu_gauge();
	if (!strcmp(argv[1], "mem"))
		return mem_gauge();
	fprintf(stderr, "speed-probe: unknown gauge '%s'; use cpu or mem\n", argv[1]);
	return 2;
}
