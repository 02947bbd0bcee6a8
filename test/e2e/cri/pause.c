/*
 * The sandbox's one process, as Kubernetes' pause image has it: it holds the pod's
 * namespaces and does nothing else until told to stop. As PID 1 of its PID namespace it
 * gets no default signal actions, so SIGTERM and SIGINT need handlers to end it; orphans
 * re-parented to it are reaped so they do not linger as zombies.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  signal(SIGTERM, stop);
  signal(SIGINT, stop);
  signal(SIGCHLD, reap);
  for (;;) pause();
}
