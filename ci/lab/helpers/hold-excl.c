/*
 * hold-excl [--hidden] DEV: hold the block device DEV the way a kernel
 * user (a mount, md, a pool) or another exclusive opener does: open it
 * O_RDONLY|O_EXCL, print "held PID" and sleep until killed. While held,
 * every other O_EXCL open of DEV fails with EBUSY.
 *
 * --hidden: then put the descriptor in flight in a socket pair of this
 * process (SCM_RIGHTS, never received) and close it. The claim stays
 * (the file is open in the socket's queue), but no /proc/PID/fd of any
 * process shows DEV: only the kernel's own answer, an O_EXCL open that
 * fails with EBUSY, finds it in use. The lab's restore scenario uses it
 * to check viommu-bench's exclusive-open check on a real kernel.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int send_fd(int sock, int fd)
{
	char byte = 'x';
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *c;

	memset(u.buf, 0, sizeof(u.buf));
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
	int hidden = argc == 3 && strcmp(argv[1], "--hidden") == 0;
	const char *dev = argv[argc - 1];
	int fd, sv[2];

	if (argc != 2 && !hidden) {
		fprintf(stderr, "usage: hold-excl [--hidden] DEV\n");
		return 2;
	}
	fd = open(dev, O_RDONLY | O_EXCL | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "hold-excl: open %s O_EXCL: %s\n", dev, strerror(errno));
		return 1;
	}
	if (hidden) {
		if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) != 0 || send_fd(sv[0], fd) != 0) {
			fprintf(stderr, "hold-excl: passing the descriptor: %s\n", strerror(errno));
			return 1;
		}
		close(fd);
	}
	printf("held %d\n", (int)getpid());
	fflush(stdout);
	for (;;)
		pause();
}
