/* Check macros for the library and the programs of this repository
 * (pxcoordd, pxagent, pxworker): propagate a failing status upwards, logging the
 * file and line at debug level on the way so that a failure can be traced
 * through the call chain (PX_LOG_LEVEL=debug). */
#ifndef PX_CHECK_H
#define PX_CHECK_H

#include "prunex/px.h"

#define PX_CHECK(call)                                                   \
  do {                                                                   \
    px_status_t px__st = (call);                                         \
    if (px__st < 0) {                                                    \
      px_log(PX_LOG_DEBUG, "%s failed: %s", #call, px_status_name(px__st)); \
      return px__st;                                                     \
    }                                                                    \
  } while (0)

#define PX_CHECK_GOTO(call, st, label)                                   \
  do {                                                                   \
    (st) = (call);                                                       \
    if ((st) < 0) {                                                      \
      px_log(PX_LOG_DEBUG, "%s failed: %s", #call, px_status_name(st));  \
      goto label;                                                        \
    }                                                                    \
  } while (0)

/* Fails with PX_ERR_INVALID and a message when cond is false. */
#define PX_REQUIRE(cond, ...)                                            \
  do {                                                                   \
    if (!(cond)) return px_set_error(PX_ERR_INVALID, __VA_ARGS__);       \
  } while (0)

#endif
