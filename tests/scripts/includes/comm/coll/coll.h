#include "comm/core_impl.h"
