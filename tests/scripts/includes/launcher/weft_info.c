/* fixture: the known exception covers transports/ and comm/memtype.h only */
#include "transports/transport.h"
#include "comm/ctx.h"
