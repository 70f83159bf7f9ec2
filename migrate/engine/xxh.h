/*
 * XXH3 as weft takes it (chunk checksums, content addresses): libxxhash, through its
 * runtime dispatch where the build found it (WEFT_HAVE_XXH_DISPATCH, x86; see
 * CMakeLists.txt). The dispatch picks AVX2 or AVX-512 when the CPU has them; the hash
 * values are the same on every path, so members built or running differently still
 * agree. The plain build of Debian's libxxhash uses SSE2: 11-12 GB/s against 22 GB/s
 * (cold) and 44 GB/s (in cache) with AVX2 on the same core.
 */
#ifndef WEFT_MIGRATE_XXH_H
#define WEFT_MIGRATE_XXH_H

#include <xxhash.h>
#ifdef WEFT_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h> /* its macros replace the XXH3 64- and 128-bit calls */
#endif

#endif
