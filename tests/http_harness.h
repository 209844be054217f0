/* Test helpers for pxcoordd's HTTP side: a minimal HTTP/1.0 GET, a tool
 * run with a time limit (promtool, Chromium), and headless Chromium's
 * rendered DOM of a page. Header-only (static functions), as the other
 * harnesses. */
#ifndef PX_HTTP_HARNESS_H
#define PX_HTTP_HARNESS_H

#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "agent_harness.h"
#include "pxctl_harness.h"

#define PXT_CHROMIUM "/usr/bin/chromium"
#define PXT_PROMTOOL "/usr/bin/promtool"

/* GETs path from 127.0.0.1:port into body (NUL-terminated, truncated to
 * cap); returns the status code, -1 on a connection failure. Bounded: 20 s
 * per read. */
static PXT_UNUSED int pxt_http_get(int port, const char *path, char *body, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char req[1024];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || write(fd, req, (size_t)n) != n) {
    close(fd);
    return -1;
  }
  size_t cap_all = 1 << 24, used = 0;
  char *all = malloc(cap_all);
  ssize_t r;
  while (all && used < cap_all - 1 && (r = read(fd, all + used, cap_all - 1 - used)) > 0)
    used += (size_t)r;
  close(fd);
  if (!all) return -1;
  all[used] = '\0';
  int status = -1;
  sscanf(all, "HTTP/1.%*d %d", &status);
  const char *b = strstr(all, "\r\n\r\n");
  snprintf(body, cap, "%s", b ? b + 4 : "");
  free(all);
  return status;
}

/* Runs argv (argv[0] the program), stdin from in_path (or /dev/null),
 * stdout to out_path, stderr to err_path; its exit code, -1 on timeout. */
static PXT_UNUSED int pxt_run_tool(const char *const *argv, const char *in_path,
                                   const char *out_path, const char *err_path, int timeout_ms) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, in_path ? in_path : "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = pxt_wait_pid(pid, timeout_ms);
  if (status == -1) {
    kill(pid, SIGKILL);
    pxt_wait_pid(pid, 5000);
    return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* `promtool check metrics` of body (files in dir): its exit code (its
 * output shown when not 0). */
static PXT_UNUSED int pxt_promtool_check(const char *dir, const char *body) {
  char in[400], out[400], err[400];
  snprintf(in, sizeof in, "%s/promtool-in.txt", dir);
  snprintf(out, sizeof out, "%s/promtool.out", dir);
  snprintf(err, sizeof err, "%s/promtool.err", dir);
  FILE *f = fopen(in, "w");
  if (!f) return -1;
  fputs(body, f);
  fclose(f);
  const char *argv[] = {PXT_PROMTOOL, "check", "metrics", NULL};
  int rc = pxt_run_tool(argv, in, out, err, 30000);
  if (rc != 0) {
    pxt_dump_file(out);
    pxt_dump_file(err);
  }
  return rc;
}

/* Loads url in headless Chromium (profile and output in dir) and returns
 * its rendered DOM (static; "" when Chromium failed, its log shown). */
static PXT_UNUSED const char *pxt_dump_dom(const char *dir, const char *url) {
  static char dom[1 << 20];
  char out[400], err[400], profile[440];
  snprintf(out, sizeof out, "%s/dom.html", dir);
  snprintf(err, sizeof err, "%s/chromium.log", dir);
  snprintf(profile, sizeof profile, "--user-data-dir=%s/chromium-profile", dir);
  const char *argv[] = {PXT_CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        "--no-first-run", profile, "--virtual-time-budget=6000",
                        "--dump-dom", url, NULL};
  int rc = pxt_run_tool(argv, NULL, out, err, 90000);
  dom[0] = '\0';
  if (rc != 0) {
    fprintf(stderr, "chromium exited with %d\n", rc);
    pxt_dump_file(err);
  }
  pxt_read_file(out, dom, sizeof dom);
  return dom;
}

/* Attribute attr of the element with id="id" in the dumped DOM as text
 * (static; "" when absent). */
static PXT_UNUSED const char *pxt_dom_attr(const char *dom, const char *id, const char *attr) {
  static char text[2048];
  char key[160], a[64];
  snprintf(key, sizeof key, "id=\"%s\"", id);
  snprintf(a, sizeof a, " %s=\"", attr);
  text[0] = '\0';
  const char *p = strstr(dom, key);
  if (!p) return text;
  const char *open = p, *close = strchr(p, '>');
  while (open > dom && *open != '<') open--;
  const char *at = strstr(open, a);
  if (!at || !close || at > close) return text;
  at += strlen(a);
  snprintf(text, sizeof text, "%.*s", (int)strcspn(at, "\""), at);
  return text;
}

#endif
