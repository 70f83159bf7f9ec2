/* fixture */
#include "comm/log.h"
