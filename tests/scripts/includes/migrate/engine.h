#include "comm/core.h"
