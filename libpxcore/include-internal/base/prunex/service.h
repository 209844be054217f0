/* Talking to a service manager (systemd's sd_notify protocol) from the
 * daemons, pxcoordd and pxagent: READY=1 once they can serve, STATUS= lines
 * a human reads in `systemctl status`, STOPPING=1, and the watchdog
 * keep-alive (WATCHDOG=1) sent from the daemon's libuv loop, so that a loop
 * that stops turning stops the pings and systemd restarts the daemon.
 *
 * Outside a unit (no NOTIFY_SOCKET, no WATCHDOG_USEC) every call does
 * nothing. Internal, for the daemons (which link the static
 * pxcore_internal); it includes uv.h, so a program using it needs libuv's
 * headers. */
#ifndef PX_SERVICE_H
#define PX_SERVICE_H

#include <stdint.h>
#include <uv.h>

/* Sends one notification ("READY=1", "STATUS=...", newline-separated
 * assignments allowed) to $NOTIFY_SOCKET. Returns 1 when sent, 0 when no
 * service manager listens, negative errno on failure (logged at debug: a
 * notification is never worth failing the daemon for). Any thread. */
int px_service_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The watchdog keep-alive. Caller-owned; lives until its close callback has
 * run (the loop has turned once after px_service_watchdog_close). */
typedef struct {
  uv_timer_t timer;
  int active;            /* the timer is initialised (and must be closed) */
  uint64_t interval_ms;  /* the ping period: half of WATCHDOG_USEC */
  uint64_t pings;        /* WATCHDOG=1 sent so far */
} px_service_watchdog_t;

/* Starts pinging every half of the interval the service manager asks for
 * (sd_watchdog_enabled: WATCHDOG_USEC, and WATCHDOG_PID when set must be
 * this process). The timer is unreferenced: it never keeps the loop alive.
 * Returns 1 when started, 0 when no watchdog is asked for. Loop thread. */
int px_service_watchdog_start(px_service_watchdog_t *w, uv_loop_t *loop);

/* Stops and closes the timer if it was started (idempotent). Loop thread. */
void px_service_watchdog_close(px_service_watchdog_t *w);

/* 1 when stderr is connected to the journal (JOURNAL_STREAM names the
 * device and inode of fd 2), so log lines should carry "<N>" syslog
 * priority prefixes instead of timestamps. */
int px_service_stderr_is_journal(void);

#endif
