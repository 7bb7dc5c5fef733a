/*
 * speed-probe: how fast this machine's CPU runs, once a second, for
 * setting beside a lab run (docs/lab.md, "How precise the lab is").
 *
 * Each line: the CLOCK_MONOTONIC time the sample began (seconds), the
 * thread CPU time a fixed piece of integer work took (µs: about 0.9 ms on
 * the lab's machine), and its wall time (µs). The CPU time leaves out
 * the time the probe waited for a CPU, so it moves only when the CPU
 * itself runs slower, e.g. with a busy SMT sibling on the real host under
 * a VM, which steal time does not show. It costs about 0.1% of one CPU.
 *
 * Usage: speed-probe > probe.txt &  (stop with kill)
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now(clockid_t clock)
{
	struct timespec t;

	clock_gettime(clock, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void)
{
	static uint32_t a[4096];
	uint32_t x;

	for (int i = 0; i < 4096; i++)
		a[i] = i * 2654435761u;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (;;) {
		double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);

		x = 1;
		for (int r = 0; r < 200; r++)
			for (int i = 0; i < 4096; i++) {
				x = x * 1664525u + a[i];
				a[i] ^= x >> 7;
			}
		double c1 = now(CLOCK_THREAD_CPUTIME_ID), w1 = now(CLOCK_MONOTONIC);

		/* x feeds a[], so the work cannot be optimised away. */
		printf("%.3f %.1f %.1f\n", w0, (c1 - c0) * 1e6, (w1 - w0) * 1e6);
		if (usleep(1000000) != 0)
			return 1;
	}
}
