/*
 * boundsort.h - the public C API of boundsort.
 *
 * The library is organised as modules under src/ (docs/ARCHITECTURE.md §7); this
 * header gathers the entry points a program embedding boundsort uses: status
 * codes, the memory accountant, opening recordings, and the version.
 */
#ifndef BOUNDSORT_H
#define BOUNDSORT_H

#define BOUNDSORT_VERSION "0.1.0"

#include "../src/common/status.h"
#include "../src/io/recording.h"
#include "../src/mem/mem.h"

#endif
