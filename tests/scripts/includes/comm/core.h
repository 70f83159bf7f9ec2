#include "weft/core.h"
