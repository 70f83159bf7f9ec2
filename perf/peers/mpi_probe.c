/* Preprocessed by perf/CMakeLists.txt with mpicc: the peer benchmark builds only where this
 * succeeds (an MPI compiler wrapper whose headers are installed). */
#include <mpi.h>
