/* imatrix/calib_zstd.c - zstd-compressed calibration text. Streaming
 * decompression, because `zstd` (and most tools that pipe into it) writes
 * frames without a content size. Several concatenated frames are one text,
 * as `zstd -d` treats them. */
#include "calib_impl.h"

#include <stdlib.h>
#include <string.h>
#include <zstd.h>

bool calib_is_zstd(const uint8_t *d, size_t n) {
    return n >= 4 && d[0] == 0x28 && d[1] == 0xB5 && d[2] == 0x2F && d[3] == 0xFD;
}

/* Doubles the buffer; 0 or -1. */
static int grow(uint8_t **buf, size_t *cap) {
    uint8_t *b = realloc(*buf, *cap * 2);
    if (!b) return -1;
    *buf = b;
    *cap *= 2;
    return 0;
}

int calib_unzstd(const char *name, const uint8_t *d, size_t n, uint8_t **out, size_t *out_n, kiln_err *err) {
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    size_t cap = n * 4 + 4096, len = 0;
    uint8_t *buf = malloc(cap);
    ZSTD_inBuffer in = {d, n, 0};
    int rc = 0;
    if (!dc || !buf) rc = kiln_fail(err, name, NULL, -1, "out of memory");
    while (rc == 0) {
        if (len == cap && grow(&buf, &cap) < 0) {
            rc = kiln_fail(err, name, NULL, -1, "out of memory");
            break;
        }
        ZSTD_outBuffer o = {buf + len, cap - len, 0};
        size_t r = ZSTD_decompressStream(dc, &o, &in);
        if (ZSTD_isError(r)) {
            rc = kiln_fail(err, name, "zstd", (int64_t)in.pos, "%s", ZSTD_getErrorName(r));
            break;
        }
        len += o.pos;
        /* All input taken and room left over: zstd has nothing more to
         * give, so a non-zero hint means the last frame is cut short. */
        if (in.pos == in.size && o.pos < o.size) {
            if (r != 0) rc = kiln_fail(err, name, "zstd", (int64_t)in.pos, "truncated zstd frame");
            break;
        }
    }
    ZSTD_freeDCtx(dc);
    if (rc < 0) {
        free(buf);
        return -1;
    }
    *out = buf;
    *out_n = len;
    return 0;
}
