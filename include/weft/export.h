/**
 * @file export.h
 * @brief WEFT_API marks the functions that libweft.so exports.
 *
 * The library is built with hidden visibility and a version script
 * (cmake/libweft.map): only what the public headers declare with WEFT_API is visible
 * to programs; internal functions (weft__*) may change between any two versions.
 */
#ifndef WEFT_EXPORT_H
#define WEFT_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

#endif
