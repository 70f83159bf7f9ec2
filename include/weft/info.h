/**
 * @file info.h
 * @brief Diagnostics: what this weft was built with, what it can use on this machine,
 * its settings, and the transport it would choose for each kind of peer and buffer.
 *
 * weft_info_print() writes a human-readable report, the text `weft-info` prints. The
 * report is for people: its wording may change between versions; do not parse it. It
 * needs no context (call it before weft_init() or without one) and reads settings from
 * the environment.
 *
 * Thread safety: may be called from any thread; concurrent calls writing to one stream
 * interleave their lines.
 */
#ifndef WEFT_INFO_H
#define WEFT_INFO_H

#include <stddef.h>
#include <stdio.h>

#include "weft/export.h"
#include "weft/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Sections and options of weft_info_print(), for weft_info_params_t::flags. */
enum weft_info_flags {
    /** Version, transports built and whether each is usable here, the CUDA runtime and
     *  driver, cuBLAS, NCCL (built, the library loaded or why not, how groups repair
     *  their NCCL communicator: "shrink" or "rebuild"), the WEFT_TRANSPORT setting. */
    WEFT_INFO_SUMMARY = 1u << 0,
    /** Every WEFT_* setting: the value in effect, whether the environment set it, its
     *  default and its documentation. */
    WEFT_INFO_CONFIG = 1u << 1,
    /** The GPUs, NICs, NUMA nodes and links of this host (hwloc), and the transport
     *  chosen for a buffer in host and CUDA memory sent to itself, to a peer on this
     *  host and to a peer on another host, with the rule that chose it. */
    WEFT_INFO_TOPOLOGY = 1u << 2,
    /** With WEFT_INFO_TOPOLOGY: this process drives GPU weft_info_params_t::gpu of the
     *  host's list. Without it: the current CUDA device, else the first GPU. */
    WEFT_INFO_TOPOLOGY_GPU = 1u << 3,
    /** The rule table of the collectives: the algorithm each takes by size and by how
     *  the group lies on its hosts, with the settings in effect (after the topology). */
    WEFT_INFO_ALGORITHMS = 1u << 4,
};

/**
 * @brief What weft_info_print() reports. Zero-initialise, then set @c size and @c flags.
 */
typedef struct weft_info_params {
    size_t size;    /**< sizeof(weft_info_params_t); lets the struct grow. */
    unsigned flags; /**< WEFT_INFO_* ORed; the sections print in the order listed there.
                         0 means WEFT_INFO_SUMMARY. */
    /** With WEFT_INFO_TOPOLOGY: an hwloc XML file standing for this host; NULL: the
     *  WEFT_TOPO_XML setting, and where that is empty, this machine. */
    const char *topo_xml;
    /** With WEFT_INFO_TOPOLOGY: an hwloc XML file standing for the other host; NULL: a
     *  host like this one. */
    const char *peer_xml;
    /** With WEFT_INFO_TOPOLOGY_GPU: index of the GPU this process drives (0 ..). */
    int gpu;
} weft_info_params_t;

/**
 * @brief Write the diagnostic report selected by @p params to @p out.
 *
 * May load the CUDA driver, cuBLAS and NCCL (each is otherwise opened on first use) and,
 * for the topology, the hwloc topology of this machine. When a section cannot be
 * completed, its last line says why and the sections after it are not printed.
 * @param[in] out    The stream to write to.
 * @param[in] params What to print; NULL prints the summary.
 * @return WEFT_OK; WEFT_ERR_INVALID_ARG for a NULL @p out, a @c size too small, an unknown
 *         flag, a negative @c gpu, topology fields without WEFT_INFO_TOPOLOGY, a GPU index
 *         past the host's GPUs or a WEFT_TRANSPORT setting that is not auto, ucx or nccl
 *         (nothing is printed for the first five); WEFT_ERR_IO when a topology cannot be
 *         read (a missing or invalid XML file) or @p out fails; WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_info_print(FILE *out, const weft_info_params_t *params);

#ifdef __cplusplus
}
#endif
#endif
