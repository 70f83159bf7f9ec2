/* fixture: launcher/ has no exception; the public API is allowed, transports/ is not */
#include "transports/transport.h"
#include "comm/core_impl.h"
#include "weft/core.h"
