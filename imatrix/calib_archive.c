/* imatrix/calib_archive.c - calibration sets shipped as one tar or zip
 * file (libarchive, any compression filter it knows). Members are read in
 * archive order, each fully into memory, and handed to calib_add_source()
 * under the name "ARCHIVE:MEMBER" so errors point inside the archive. */
#include "calib_impl.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

bool calib_is_archive(const char *path, const uint8_t *head, size_t n_head) {
    static const char *const names[] = {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.xz",
                                        ".tar.bz2", ".zip"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (has_suffix(path, names[i])) return true;
    if (n_head >= 4 && !memcmp(head, "PK\x03\x04", 4)) return true;
    return n_head >= 262 && !memcmp(head + 257, "ustar", 5);
}

/* Members a packing tool adds on its own (macOS resource forks, dot
 * files) are not calibration text. */
static bool skipped(const char *member) {
    const char *base = strrchr(member, '/');
    base = base ? base + 1 : member;
    return base[0] == '.' || !strncmp(member, "__MACOSX/", 9) || strstr(member, "/__MACOSX/");
}

static int member_bytes(struct archive *a, const char *name, uint8_t **out, size_t *out_n, kiln_err *err) {
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) return kiln_fail(err, name, NULL, -1, "out of memory");
    for (;;) {
        if (n == cap) {
            uint8_t *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                return kiln_fail(err, name, NULL, -1, "out of memory");
            }
            buf = b;
            cap *= 2;
        }
        la_ssize_t got = archive_read_data(a, buf + n, cap - n);
        if (got < 0) {
            kiln_fail(err, name, NULL, (int64_t)n, "%s", archive_error_string(a));
            free(buf);
            return -1;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    *out = buf;
    *out_n = n;
    return 0;
}

int calib_add_archive(calib_text *t, const char *path, kiln_err *err) {
    struct archive *a = archive_read_new();
    if (!a) return kiln_fail(err, path, NULL, -1, "out of memory");
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_zip(a);
    int rc = 0;
    if (archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
        rc = kiln_fail(err, path, NULL, -1, "not a readable tar or zip archive: %s", archive_error_string(a));
        archive_read_free(a);
        return rc;
    }
    struct archive_entry *e;
    int r, n_members = 0;
    while (rc == 0 && (r = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
        if (r < ARCHIVE_WARN) {
            rc = kiln_fail(err, path, NULL, -1, "archive: %s", archive_error_string(a));
            break;
        }
        const char *member = archive_entry_pathname(e);
        if (archive_entry_filetype(e) != AE_IFREG || !member || skipped(member)) continue;
        char name[4096];
        snprintf(name, sizeof name, "%s:%s", path, member);
        uint8_t *d = NULL;
        size_t n = 0;
        if (member_bytes(a, name, &d, &n, err) < 0) {
            rc = -1;
            break;
        }
        if (calib_is_archive(member, d, n)) rc = kiln_fail(err, name, NULL, -1, "archives inside archives are not read");
        else rc = calib_add_source(t, name, d, n, err);
        free(d);
        n_members++;
    }
    if (rc == 0 && n_members == 0) rc = kiln_fail(err, path, NULL, -1, "the archive holds no files");
    archive_read_free(a);
    return rc;
}
