/*
 * Signals reach the supervisor through a self-pipe: the handler of SIGCHLD, SIGINT,
 * SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 writes the signal's number into a pipe that the
 * poll() loop watches. What each does (weftrun_supervise.c): SIGINT and SIGTERM are
 * forwarded and stop the job; SIGHUP stops it too, but the ranks get SIGTERM, since UCX
 * takes SIGHUP as its debug signal (UCX_DEBUG_SIGNO) and would not stop; SIGUSR1 and
 * SIGUSR2, which batch systems send as a warning (Slurm's --signal before preemption or
 * the time limit), are forwarded to the running ranks and the job goes on. --store-only
 * has no ranks: it ignores the two and stops on the others.
 *
 * Not a signalfd: a signalfd needs the signals blocked in every thread, and libraries
 * start threads of their own before main() (OpenBLAS does) whose masks weftrun cannot
 * set; such a thread would take a SIGTERM with the default action and kill weftrun. A
 * handler works whichever thread the kernel picks.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "launcher/weftrun.h"

static const int handled[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
#define N_HANDLED (sizeof(handled) / sizeof(handled[0]))

/* The write end of the self-pipe: a handler can only find it in a global. */
static int sig_pipe_wr = -1;

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    /* Full pipe: enough wake-ups are queued already; SIGCHLD reaps all, others repeat. */
    ssize_t unused = write(sig_pipe_wr, &b, 1);
    (void)unused;
    errno = saved;
}

weft_status_t weftrun_signals_init(int *sigfd, const weft_logger_t *lg)
{
    int p[2];
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
        WEFT_ERROR(lg, "pipe: %m");
        return WEFT_ERR_IO;
    }
    sig_pipe_wr = p[1];
    /* A closed stdout must not kill weftrun while ranks still run. */
    signal(SIGPIPE, SIG_IGN);
    /* No SA_NOCLDSTOP: a rank that stops is news too (it is fenced if it stays stopped). */
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_HANDLED; i++) {
        /* This also undoes an inherited SIG_IGN of SIGCHLD, which would auto-reap ranks. */
        if (sigaction(handled[i], &sa, NULL) != 0) {
            WEFT_ERROR(lg, "sigaction(%s): %m", strsignal(handled[i]));
            return WEFT_ERR_IO;
        }
    }
    *sigfd = p[0];
    return WEFT_OK;
}

void weftrun_signals_reset_in_child(void)
{
    for (size_t i = 0; i < N_HANDLED; i++) {
        signal(handled[i], SIG_DFL);
    }
    signal(SIGPIPE, SIG_DFL);
}

int weftrun_next_signal(int sigfd)
{
    unsigned char b;
    ssize_t n;
    do {
        n = read(sigfd, &b, 1);
    } while (n < 0 && errno == EINTR);
    return n == 1 ? (int)b : 0;
}

bool weftrun_wait_for_signal(int sigfd, uint64_t timeout_ms, const weft_logger_t *lg)
{
    uint64_t deadline = timeout_ms != 0 ? weft__now_ms() + timeout_ms : 0;
    for (;;) {
        int wait_ms = -1;
        if (deadline != 0) {
            uint64_t now = weft__now_ms();
            if (now >= deadline) {
                return false;
            }
            wait_ms = deadline - now > INT_MAX ? INT_MAX : (int)(deadline - now);
        }
        struct pollfd pfd = {.fd = sigfd, .events = POLLIN};
        if (poll(&pfd, 1, wait_ms) < 0 && errno != EINTR) {
            WEFT_ERROR(lg, "poll: %m");
            return true;
        }
        int sig;
        while ((sig = weftrun_next_signal(sigfd)) != 0) {
            if (sig == SIGUSR1 || sig == SIGUSR2) {
                WEFT_INFO(lg, "%s: no ranks here to forward it to; the store goes on",
                          strsignal(sig));
            } else if (sig != SIGCHLD) {
                WEFT_INFO(lg, "%s: stopping the store", strsignal(sig));
                return true;
            }
        }
    }
}
