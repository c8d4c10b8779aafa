/* tt_stream.h — line buffers of a streamed region (tinytrain/memory/stream.py, codegen/emit_stream.py).
 * A line buffer holds rows [row0, next) of a tensor, row r at line + (r - row0) * row_bytes. */
#ifndef TT_STREAM_H
#define TT_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline int tt_imin(int a, int b) { return a < b ? a : b; }
static inline int tt_imax(int a, int b) { return a > b ? a : b; }

/* Drop the rows below `low` from a line buffer holding rows [row0, next): the rows [low, next) move to its
 * front. Returns the new first row, low. */
static inline int tt_line_drop(int8_t *line, int row0, int low, int next, int row_bytes)
{
    memmove(line, line + (size_t)(low - row0) * (size_t)row_bytes, (size_t)(next - low) * (size_t)row_bytes);
    return low;
}

#endif
