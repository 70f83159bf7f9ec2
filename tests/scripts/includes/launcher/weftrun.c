/* fixture */
#include "comm/log.h"
#include "comm/store/store.h"
#include "comm/ctx.h"
