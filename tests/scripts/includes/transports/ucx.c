/* fixture: a transport reaches into comm/ */
#include "transports/transport.h"
#include "comm/ctx/log.h"
