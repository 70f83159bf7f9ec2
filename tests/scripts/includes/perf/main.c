/* fixture: weft-perf uses an internal header */
#include "perf.h"
#include "weft/core.h"
#include "util/clock.h"
