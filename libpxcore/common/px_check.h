/* What every file of the library includes: the check macros (public in
 * prunex/check.h, the daemons use them too) and PX_FREE_ALL. */
#ifndef PX_CHECK_SHIM_H
#define PX_CHECK_SHIM_H
#include <stddef.h>

#include "prunex/check.h"

/* px_free of every pointer listed (NULL ones too), in order: a destructor's
 * list of owned buffers in one statement. Not for C++ (.cu) files. */
#define PX_FREE_ALL(...)                                        \
  px__free_all((void *const[]){__VA_ARGS__},                    \
               sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))
void px__free_all(void *const *p, size_t n);
#endif
