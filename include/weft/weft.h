/**
 * @file weft.h
 * @brief Umbrella header: include this to use weft.
 */
#ifndef WEFT_H
#define WEFT_H

#include "weft/status.h"
#include "weft/core.h"
#include "weft/coll.h"
#include "weft/group.h"
#include "weft/vocab.h"
#include "weft/migrate.h"

#endif
