/* fixture */
#include "comm/ctx/log.h"
#include "comm/store/store.h"
#include "transports/transport.h"
