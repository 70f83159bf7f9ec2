/* fixture: the store reaches above itself */
#include "comm/store/store.h"
#include "comm/ctx/log.h"
#include "weft/core.h"
#include "util/clock.h"
#include "comm/core_impl.h"
