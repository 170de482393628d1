/*
 * abtime: time several commands side by side, interleaved run by run.
 *
 *   abtime [-w WARMUP] [-n RUNS] -- CMD1 ARGS... ::: CMD2 ARGS... [::: ...]
 *
 * Each command may start with @ns=PATH (a network namespace file, such as
 * /run/netns/NAME: the command runs in it) and then NAME=value words, which
 * are put in front of the command's environment (a name given there wins
 * over the inherited one, as getenv takes the first); the program itself is
 * the first word without '=' (no PATH search).  So commands in different
 * namespaces and settings are interleaved in one run, with no exec hop of
 * env(1) or ip-netns(8) added to any of them.
 *
 * Each iteration runs every command once (the order alternates between iterations, so
 * neither command always runs first), WARMUP iterations are discarded, RUNS iterations
 * are kept.  Commands are started with posix_spawn (no shell), stdin, stdout
 * and stderr on /dev/null, and timed from spawn to wait4 with CLOCK_MONOTONIC.
 * A command that exits non-zero aborts the measurement.
 *
 * Output, one line per command, tab-separated:
 *   median_us  p25_us  p75_us  min_us  max_rss_kib  median_cpu_us
 * where max_rss_kib is the largest ru_maxrss seen over the kept runs and
 * median_cpu_us the median of the CPU time the kernel accounted to the run
 * (ru_utime + ru_stime from wait4, the posix_spawn child's set-up included):
 * time spent waiting for a CPU another process holds is not in it, so on a
 * shared machine it moves much less than the wall-clock figures.
 *
 * Interleaving keeps the comparison fair on a shared machine: a burst of
 * background load hits all commands alike instead of one block of runs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The network namespace abtime started in, opened once any command names
 * one of its own (@ns=); -1 otherwise, and then setns is never called. */
static int home_netns = -1;

#define MAX_CMDS 16

struct cmd {
	char **argv;
	char **envp;	/* the NAME=value words given, then the inherited environment */
	int netns;	/* the @ns= namespace, or -1: the one abtime started in */
	double *us;
	double *cpu_us;
	long max_rss;
};

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double tv_us(struct timeval tv)
{
	return tv.tv_sec * 1e6 + tv.tv_usec;
}

static void run_once(struct cmd *c, posix_spawn_file_actions_t *fa, double *us, double *cpu_us, long *rss)
{
	struct rusage ru;
	int status;
	pid_t pid;
	/* Outside the timed span: the child inherits the namespace abtime is in. */
	if (home_netns >= 0 && setns(c->netns >= 0 ? c->netns : home_netns, CLONE_NEWNET) != 0) {
		perror("abtime: setns");
		exit(1);
	}
	double t0 = now_us();
	int err = posix_spawn(&pid, c->argv[0], fa, NULL, c->argv, c->envp);
	if (err) {
		fprintf(stderr, "abtime: spawn %s: %s\n", c->argv[0], strerror(err));
		exit(1);
	}
	while (wait4(pid, &status, 0, &ru) < 0)
		if (errno != EINTR) {
			perror("abtime: wait4");
			exit(1);
		}
	*us = now_us() - t0;
	*rss = ru.ru_maxrss;
	*cpu_us = tv_us(ru.ru_utime) + tv_us(ru.ru_stime);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "abtime: %s failed (status 0x%x)\n", c->argv[0], status);
		exit(1);
	}
}

/* Takes the command's leading @ns=PATH and NAME=value words off its argv
 * (see the top of the file); false when no program is left. */
static int split_prefix(struct cmd *c)
{
	int given = 0, inherited = 0;

	c->netns = -1;
	if (c->argv[0] && strncmp(c->argv[0], "@ns=", 4) == 0) {
		if (home_netns < 0 && (home_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
			perror("abtime: /proc/self/ns/net");
			exit(1);
		}
		if ((c->netns = open(c->argv[0] + 4, O_RDONLY | O_CLOEXEC)) < 0) {
			fprintf(stderr, "abtime: %s: %s\n", c->argv[0] + 4, strerror(errno));
			exit(1);
		}
		c->argv++;
	}
	while (c->argv[given] && strchr(c->argv[given], '='))
		given++;
	while (environ[inherited])
		inherited++;
	c->envp = calloc(given + inherited + 1, sizeof(char *));
	memcpy(c->envp, c->argv, given * sizeof(char *));
	memcpy(c->envp + given, environ, inherited * sizeof(char *));
	c->argv += given;
	return c->argv[0] != NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Linear interpolation between closest ranks, on a sorted array. */
static double quantile(const double *v, int n, double q)
{
	double pos = q * (n - 1);
	int lo = (int)pos;
	if (lo >= n - 1)
		return v[n - 1];
	return v[lo] + (pos - lo) * (v[lo + 1] - v[lo]);
}

static void usage(void)
{
	fprintf(stderr, "usage: abtime [-w WARMUP] [-n RUNS] -- CMD ARGS... ::: CMD ARGS... [::: ...]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int warmup = 10, runs = 100, opt, ncmd = 0;
	struct cmd cmds[MAX_CMDS];
	posix_spawn_file_actions_t fa;

	while ((opt = getopt(argc, argv, "w:n:")) != -1) {
		if (opt == 'w')
			warmup = atoi(optarg);
		else if (opt == 'n')
			runs = atoi(optarg);
		else
			usage();
	}
	if (optind >= argc || runs < 1 || warmup < 0)
		usage();

	/* Split the remaining words at ":::" (modifies argv in place). */
	for (int i = optind; i < argc; i++) {
		if (ncmd == MAX_CMDS)
			usage();
		cmds[ncmd].argv = &argv[i];
		while (i < argc && strcmp(argv[i], ":::") != 0)
			i++;
		if (i < argc)
			argv[i] = NULL;
		if (!split_prefix(&cmds[ncmd]))
			usage();
		cmds[ncmd].us = calloc(runs, sizeof(double));
		cmds[ncmd].cpu_us = calloc(runs, sizeof(double));
		cmds[ncmd].max_rss = 0;
		ncmd++;
	}

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);

	for (int r = 0; r < warmup + runs; r++) {
		for (int k = 0; k < ncmd; k++) {
			struct cmd *c = &cmds[r % 2 ? ncmd - 1 - k : k];
			double us, cpu_us;
			long rss;
			run_once(c, &fa, &us, &cpu_us, &rss);
			if (r >= warmup) {
				c->us[r - warmup] = us;
				c->cpu_us[r - warmup] = cpu_us;
				if (rss > c->max_rss)
					c->max_rss = rss;
			}
		}
	}

	for (int k = 0; k < ncmd; k++) {
		qsort(cmds[k].us, runs, sizeof(double), cmp_double);
		qsort(cmds[k].cpu_us, runs, sizeof(double), cmp_double);
		printf("%.1f\t%.1f\t%.1f\t%.1f\t%ld\t%.1f\n", quantile(cmds[k].us, runs, 0.5),
		       quantile(cmds[k].us, runs, 0.25), quantile(cmds[k].us, runs, 0.75),
		       cmds[k].us[0], cmds[k].max_rss, quantile(cmds[k].cpu_us, runs, 0.5));
	}
	return 0;
}
