/*
 * tcg-race: the lab host's side of a race in the outer QEMU's TCG (docs/lab.md,
 * "Lab host crashes"). Runs in the lab host, which QEMU emulates with
 * multi-threaded TCG and nested SVM.
 *
 *   tcg-race VCPU_CPU HAMMER_CPU SECONDS
 *
 * One thread, pinned to lab host CPU VCPU_CPU, runs a 1-vCPU KVM guest (real
 * mode, no devices) that loops on CPUID (one #VMEXIT and VMRUN each, handled
 * in the kernel) and every 1000 of them does an OUT (an exit to this
 * program). Another, pinned to HAMMER_CPU, loops on FXRSTOR and XRSTOR in
 * user space, and every 4096 of them wakes a thread pinned to VCPU_CPU
 * through a pipe (a reschedule IPI while that CPU is in the guest: an INTR
 * #VMEXIT with an interrupt pending). QEMU's cpu_clear_ignne() writes CPU
 * 0's hflags2 on every FXRSTOR/XRSTOR of any vCPU: with VCPU_CPU 0 and
 * HAMMER_CPU 1 that races CPU 0's VMRUN/#VMEXIT updates of GIF and NPT in
 * the same word; with the roles swapped (1 0) it does not (the control).
 *
 * Prints a progress line every 10 s and a last line
 *   tcg-race: done vcpu=A hammer=B seconds=S exits=N ios=N restores=N wakes=N
 * exit 0 when it ran its time, 1 when KVM failed. A crash ends the lab host.
 * Built static (gcc -static-pie -O2 -pthread) by the lab (labkit/images.py).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;
static atomic_ullong exits, ios, restores, wakes;
static int vcpu_cpu, hammer_cpu;
static int wake_pipe[2];
static const char *failure;

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof s, &s)) {
		perror("tcg-race: sched_setaffinity");
		exit(1);
	}
}

/* Real-mode guest at 0x1000: mov si,1000; 1: xor eax,eax; cpuid; dec si;
 * jnz 1b; out 0x10,al; jmp 0x1000 (CPUID writes eax, ebx, ecx and edx). */
static const uint8_t guest_code[] = {
	0xbe, 0xe8, 0x03,       /* 1000: mov si, 1000 */
	0x66, 0x31, 0xc0,       /* 1003: xor eax, eax */
	0x0f, 0xa2,             /* 1006: cpuid */
	0x4e,                   /* 1008: dec si */
	0x75, 0xf8,             /* 1009: jnz 1003 */
	0xe6, 0x10,             /* 100b: out 0x10, al */
	0xeb, 0xf1,             /* 100d: jmp 1000 */
};

static void *vcpu_thread(void *arg)
{
	(void)arg;
	pin(vcpu_cpu);
	int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0) {
		failure = "open /dev/kvm";
		goto out;
	}
	int vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0) {
		failure = "KVM_CREATE_VM";
		goto out;
	}
	size_t mem_size = 0x10000;
	uint8_t *mem = mmap(NULL, mem_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	memcpy(mem + 0x1000, guest_code, sizeof guest_code);
	struct kvm_userspace_memory_region region = {
		.slot = 0, .guest_phys_addr = 0, .memory_size = mem_size, .userspace_addr = (uintptr_t)mem,
	};
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0) {
		failure = "KVM_SET_USER_MEMORY_REGION";
		goto out;
	}
	int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
	int run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (vcpu < 0 || run_size <= 0) {
		failure = "KVM_CREATE_VCPU";
		goto out;
	}
	struct kvm_run *run = mmap(NULL, run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0);
	struct kvm_sregs sregs;
	ioctl(vcpu, KVM_GET_SREGS, &sregs);
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	ioctl(vcpu, KVM_SET_SREGS, &sregs);
	struct kvm_regs regs = { .rip = 0x1000, .rflags = 0x2 };
	ioctl(vcpu, KVM_SET_REGS, &regs);
	while (!atomic_load(&stop)) {
		if (ioctl(vcpu, KVM_RUN, 0) < 0) {
			if (errno == EINTR)
				continue;
			failure = "KVM_RUN";
			break;
		}
		if (run->exit_reason != KVM_EXIT_IO) {
			static char why[64];
			snprintf(why, sizeof why, "unexpected exit reason %u", run->exit_reason);
			failure = why;
			break;
		}
		atomic_fetch_add(&ios, 1);
		atomic_fetch_add(&exits, 1001);
	}
out:
	if (failure)
		atomic_store(&stop, 1);
	return NULL;
}

static uint8_t area[4096] __attribute__((aligned(64)));

static void *hammer_thread(void *arg)
{
	(void)arg;
	pin(hammer_cpu);
	unsigned int eax, ebx, ecx, edx;
	__asm__ volatile("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(1), "c"(0));
	int xsave = (ecx >> 27) & 1; /* OSXSAVE */
	__asm__ volatile("fninit; fxsave %0" : "=m"(area));
	if (xsave) {
		memset(area + 512, 0, 64); /* a valid XSAVE header */
		__asm__ volatile("xsave %0" : "+m"(area) : "a"(3), "d"(0));
	}
	unsigned long long n = 0;
	while (!atomic_load(&stop)) {
		for (int i = 0; i < 4096; i++) {
			__asm__ volatile("fxrstor %0" : : "m"(area));
			if (xsave)
				__asm__ volatile("xrstor %0" : : "m"(area), "a"(3), "d"(0));
		}
		n += xsave ? 8192 : 4096;
		atomic_store(&restores, n);
		if (write(wake_pipe[1], "w", 1) == 1)
			atomic_fetch_add(&wakes, 1);
	}
	return NULL;
}

static void *waker_thread(void *arg)
{
	(void)arg;
	pin(vcpu_cpu);
	char buf[64];
	fcntl(wake_pipe[0], F_SETFL, 0); /* the reader blocks, the writer never does */
	while (read(wake_pipe[0], buf, sizeof buf) > 0)
		;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: tcg-race VCPU_CPU HAMMER_CPU SECONDS\n");
		return 2;
	}
	vcpu_cpu = atoi(argv[1]);
	hammer_cpu = atoi(argv[2]);
	int seconds = atoi(argv[3]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (pipe2(wake_pipe, O_NONBLOCK)) {
		perror("tcg-race: pipe");
		return 1;
	}
	printf("tcg-race: start vcpu=%d hammer=%d seconds=%d\n", vcpu_cpu, hammer_cpu, seconds);
	pthread_t v, h, w;
	pthread_create(&w, NULL, waker_thread, NULL);
	pthread_create(&v, NULL, vcpu_thread, NULL);
	pthread_create(&h, NULL, hammer_thread, NULL);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int elapsed = 0, next = 10;
	while (!atomic_load(&stop) && elapsed < seconds) {
		sleep(1);
		clock_gettime(CLOCK_MONOTONIC, &t);
		elapsed = (int)(t.tv_sec - t0.tv_sec);
		if (elapsed >= next) {
			next += 10;
			printf("tcg-race: %ds vcpu=%d hammer=%d exits=%llu ios=%llu restores=%llu wakes=%llu\n", elapsed,
			       vcpu_cpu, hammer_cpu, atomic_load(&exits), atomic_load(&ios), atomic_load(&restores),
			       atomic_load(&wakes));
		}
	}
	atomic_store(&stop, 1);
	pthread_join(h, NULL);
	close(wake_pipe[1]);
	pthread_join(w, NULL);
	/* The vCPU thread leaves KVM_RUN at its next OUT (every 1000 CPUIDs). */
	pthread_join(v, NULL);
	if (failure) {
		printf("tcg-race: failed: %s (%s)\n", failure, strerror(errno));
		return 1;
	}
	printf("tcg-race: done vcpu=%d hammer=%d seconds=%d exits=%llu ios=%llu restores=%llu wakes=%llu\n", vcpu_cpu,
	       hammer_cpu, elapsed, atomic_load(&exits), atomic_load(&ios), atomic_load(&restores), atomic_load(&wakes));
	return 0;
}
