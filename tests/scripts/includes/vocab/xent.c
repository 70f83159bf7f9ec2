#include "comm/core.h"
#include "comm/coll/coll.h"
