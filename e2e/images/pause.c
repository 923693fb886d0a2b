/*
 * The e2e cluster's pod sandbox process (its "pause" image), built by
 * e2e/images/build.sh with gcc -Os -static.
 *
 * It only has to exist: it holds the pod's namespaces while the pod's
 * containers come and go. As PID 1 of a pod that shares its PID namespace it
 * also inherits orphans, so it reaps them. PID 1 gets no default signal
 * actions from the kernel, so SIGINT/SIGTERM need handlers for the runtime's
 * stop to end it (with status 0) before its SIGKILL.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig)
{
	(void)sig;
	_exit(0);
}

static void reap(int sig)
{
	int saved = errno; /* a handler must not clobber the interrupted code's errno */

	(void)sig;
	/* One SIGCHLD may stand for several exits: collect all that are ready. */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	errno = saved;
}

static void on(int sig, void (*handler)(int), int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sa.sa_flags = flags;
	sigfillset(&sa.sa_mask); /* handlers never interrupt each other */
	if (sigaction(sig, &sa, NULL) != 0) {
		perror("pause: sigaction");
		_exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
		puts("nfguard-e2e-pause");
		return 0;
	}
	if (getpid() != 1)
		fputs("pause: warning: not running as PID 1\n", stderr);

	on(SIGINT, stop, 0);
	on(SIGTERM, stop, 0);
	on(SIGCHLD, reap, SA_NOCLDSTOP | SA_RESTART);

	for (;;)
		pause();
}
