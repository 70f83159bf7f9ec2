/* fixture */
#include "comm/log.h"
#include "comm/store/store.h"
#include "transports/transport.h"
