/**
 * @file weft.h
 * @brief Umbrella header: include this to use weft. It includes every public header;
 * none of them needs a CUDA header (CUDA streams are passed as void *).
 */
#ifndef WEFT_H
#define WEFT_H

#include "weft/status.h"
#include "weft/core.h"
#include "weft/coll.h"
#include "weft/group.h"
#include "weft/vocab.h"
#include "weft/cuda.h"
#include "weft/info.h"
#include "weft/migrate.h"
#include "weft/snapshot.h"
#include "weft/elastic.h"
#include "weft/kv.h"
#include "weft/spill.h"

#endif
