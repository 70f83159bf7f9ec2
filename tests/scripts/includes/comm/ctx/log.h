/* fixture */
#include "weft/core.h"
