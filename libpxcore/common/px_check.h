/* The check macros moved to the public prunex/check.h (the daemons use
 * them too); the library's files keep including them by this name. */
#ifndef PX_CHECK_SHIM_H
#define PX_CHECK_SHIM_H
#include "prunex/check.h"
#endif
