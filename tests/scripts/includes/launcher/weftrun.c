/* fixture */
#include "comm/ctx/log.h"
#include "comm/store/store.h"
#include "comm/core_impl.h"
