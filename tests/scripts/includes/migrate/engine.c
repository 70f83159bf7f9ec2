#include "comm/core.h"
#include "comm/core_impl.h"
#include "migrate/engine.h"
