/*
 * exec-hop: a static program with no libc that only execs its first argument
 * (with the remaining arguments and the same environment).  Timed against the
 * stand-in backend alone, it shows what one extra exec hop costs on this
 * machine, the floor under any wrapper that decides and then execs.
 * x86_64 Linux only; built with
 *   gcc -static -nostdlib -Os -fno-stack-protector -o exec-hop exec-hop.c
 */
__asm__(".globl _start\n"
	"_start:\n\t"
	"mov %rsp, %rdi\n\t" /* argc, argv..., NULL, envp..., NULL */
	"and $-16, %rsp\n\t"
	"call hop\n");

static long syscall3(long number, long a, long b, long c)
{
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(number), "D"(a), "S"(b), "d"(c)
			 : "rcx", "r11", "memory");
	return ret;
}

__attribute__((used, noreturn)) void hop(long *stack)
{
	long argc = stack[0];
	char **argv = (char **)(stack + 1);
	char **envp = argv + argc + 1;
	if (argc > 1)
		syscall3(59 /* SYS_execve */, (long)argv[1], (long)(argv + 1), (long)envp);
	syscall3(60 /* SYS_exit */, 127, 0, 0);
	__builtin_unreachable();
}
