/* fixture */
#include "comm/ctx/log.h"
