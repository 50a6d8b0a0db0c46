/*
 * spikeglx_meta.c - the SpikeGLX `.meta` text: key=value lines.
 *
 * The text is copied once into an owned buffer; the parser walks it line by
 * line (a line ends at LF, CR or CRLF, or at the end of the text), splits
 * each non-blank line at its FIRST '=', trims blanks around key and value,
 * drops a leading '~' from the key, and writes NULs in place so every key and
 * value is a C string inside the copy. The pairs are kept in file order;
 * lookups scan from the end so the last of duplicate keys wins (a warning
 * names each repeated key once at parse time, found by sorting the keys). Everything is bounded by the text
 * length: a NUL byte, a line with no '=', or an empty key is an error naming
 * the line, never a crash.
 *
 * Numbers are parsed strictly: the whole value must be one finite number
 * (surrounding blanks allowed), so "30000Hz" or "" are refused with the key.
 */
#include "spikeglx.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../mem/mem.h"

static char *trim(char *s, char *end)
{
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *end = '\0';
    return s;
}

static int kv_cmp(const void *a, const void *b)
{
    const bs_sglx_kv *x = *(const bs_sglx_kv *const *)a, *y = *(const bs_sglx_kv *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x < y ? -1 : x > y);
}

void bs_sglx_meta_free(bs_sglx_meta *m)
{
    bs_mem_free(m->text);
    bs_mem_free(m->kv);
    m->text = NULL;
    m->kv = NULL;
    m->n = 0;
}

bs_status bs_sglx_meta_parse(const char *text, size_t len, const char *name, bs_sglx_meta *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name ? name : "(meta)");
    if (len > BS_SGLX_META_MAX_BYTES)
        return bs_error(BS_ERR_INPUT, "%s: the metadata file is %zu bytes, more than the %zu a .meta may have", m->name,
                        len, BS_SGLX_META_MAX_BYTES);
    if (len == 0)
        return bs_error(BS_ERR_INPUT, "%s: the metadata file is empty, expected key=value lines", m->name);
    if (memchr(text, '\0', len))
        return bs_error(BS_ERR_INPUT, "%s: the metadata file holds a NUL byte, expected text key=value lines",
                        m->name);
    /* count lines to size the pair array */
    size_t max_pairs = 1;
    for (size_t i = 0; i < len; i++)
        if (text[i] == '\n' || text[i] == '\r')
            max_pairs++;
    m->text = bs_mem_alloc("io/spikeglx_meta", len + 1);
    m->kv = bs_mem_calloc("io/spikeglx_meta", max_pairs, sizeof *m->kv);
    if (!m->text || !m->kv) {
        bs_sglx_meta_free(m);
        return BS_ERR_MEMORY;
    }
    memcpy(m->text, text, len);
    m->text[len] = '\0';

    char *p = m->text, *end = m->text + len;
    int line = 0;
    while (p < end) {
        line++;
        char *eol = p;
        while (eol < end && *eol != '\n' && *eol != '\r')
            eol++;
        char *next = eol;
        if (next < end && *next == '\r')
            next++;
        if (next < end && *next == '\n' && (next == eol || next[-1] == '\r'))
            next++;
        /* a blank line (only spaces or tabs) is skipped */
        char *q = p;
        while (q < eol && (*q == ' ' || *q == '\t'))
            q++;
        if (q == eol) {
            p = next;
            continue;
        }
        char *eq = memchr(p, '=', (size_t)(eol - p));
        if (!eq) {
            bs_sglx_meta_free(m);
            return bs_error(BS_ERR_INPUT, "%s: line %d: expected key=value, got a line without '='", name ? name : "(meta)",
                            line);
        }
        char *key = trim(p, eq);
        char *value = trim(eq + 1, eol);
        if (*key == '~')
            key++;
        if (*key == '\0') {
            bs_sglx_meta_free(m);
            return bs_error(BS_ERR_INPUT, "%s: line %d: expected key=value, got an empty key", name ? name : "(meta)",
                            line);
        }
        m->kv[m->n++] = (bs_sglx_kv){key, value, line};
        p = next;
    }
    if (m->n == 0) {
        bs_sglx_meta_free(m);
        return bs_error(BS_ERR_INPUT, "%s: the metadata file has no key=value lines", name ? name : "(meta)");
    }
    /* report duplicates: sort the pairs by key (stable by position), warn once per repeated key */
    const bs_sglx_kv **sorted = malloc(m->n * sizeof *sorted);
    if (sorted) {
        for (size_t i = 0; i < m->n; i++)
            sorted[i] = &m->kv[i];
        qsort(sorted, m->n, sizeof *sorted, kv_cmp);
        for (size_t i = 1; i < m->n; i++)
            if (strcmp(sorted[i]->key, sorted[i - 1]->key) == 0 && (i < 2 || strcmp(sorted[i]->key, sorted[i - 2]->key)))
                bs_log_warn("%s: key '%s' appears more than once (lines %d and %d); using the last value", m->name,
                            sorted[i]->key, sorted[i - 1]->line, sorted[i]->line);
        free(sorted);
    }
    return BS_OK;
}

bs_status bs_sglx_meta_read(const char *path, bs_sglx_meta *m)
{
    memset(m, 0, sizeof *m);
    char *text = NULL;
    size_t len = 0;
    bs_status st = bs_read_text_file(path, BS_SGLX_META_MAX_BYTES, &text, &len);
    if (st != BS_OK)
        return st;
    st = bs_sglx_meta_parse(text, len, path, m);
    free(text);
    return st;
}

const char *bs_sglx_meta_get(const bs_sglx_meta *m, const char *key)
{
    if (key[0] == '~')
        key++;
    for (size_t i = m->n; i-- > 0;)
        if (strcmp(m->kv[i].key, key) == 0)
            return m->kv[i].value;
    return NULL;
}

bs_status bs_sglx_meta_double(const bs_sglx_meta *m, const char *key, double *v)
{
    const char *s = bs_sglx_meta_get(m, key);
    if (!s)
        return bs_error(BS_ERR_INPUT, "%s: field '%s' is missing, expected a number", m->name, key);
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    while (*end == ' ' || *end == '\t')
        end++;
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(d))
        return bs_error(BS_ERR_INPUT, "%s: field '%s': expected a number, got '%.60s'", m->name, key, s);
    *v = d;
    return BS_OK;
}

/* Strict decimal integer; returns 0 on success. */
static int parse_i64(const char *s, const char **endp, int64_t *v)
{
    char *end;
    errno = 0;
    if (!(isdigit((unsigned char)*s) || ((*s == '-' || *s == '+') && isdigit((unsigned char)s[1]))))
        return -1;
    long long x = strtoll(s, &end, 10);
    if (errno == ERANGE)
        return -1;
    *v = x;
    *endp = end;
    return 0;
}

bs_status bs_sglx_meta_int64(const bs_sglx_meta *m, const char *key, int64_t lo, int64_t hi, int64_t *v)
{
    const char *s = bs_sglx_meta_get(m, key);
    if (!s)
        return bs_error(BS_ERR_INPUT, "%s: field '%s' is missing, expected an integer", m->name, key);
    const char *end;
    int64_t x;
    if (parse_i64(s, &end, &x) != 0)
        return bs_error(BS_ERR_INPUT, "%s: field '%s': expected an integer, got '%.60s'", m->name, key, s);
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end != '\0')
        return bs_error(BS_ERR_INPUT, "%s: field '%s': expected an integer, got '%.60s'", m->name, key, s);
    if (x < lo || x > hi)
        return bs_error(BS_ERR_INPUT, "%s: field '%s': expected an integer in %lld..%lld, got %lld", m->name, key,
                        (long long)lo, (long long)hi, (long long)x);
    *v = x;
    return BS_OK;
}

bs_status bs_sglx_parse_list(const char *text, int limit, const char *name, const char *field, int **out,
                             int *n_out)
{
    *out = NULL;
    *n_out = 0;
    size_t cap = 64, n = 0;
    int *v = malloc(cap * sizeof *v);
    if (!v)
        return bs_error(BS_ERR_MEMORY, "%s: out of memory reading '%s'", name, field);
    const char *s = text;
    while (*s == ' ')
        s++;
    while (*s) {
        int64_t a, b;
        const char *e;
        if (parse_i64(s, &e, &a) != 0)
            goto bad;
        b = a;
        s = e;
        if (*s == ':') {
            if (parse_i64(s + 1, &e, &b) != 0)
                goto bad;
            s = e;
        }
        if (a < 0 || b < a || b >= limit) {
            free(v);
            if (b < a)
                return bs_error(BS_ERR_INPUT, "%s: field '%s': range %lld:%lld is reversed", name, field,
                                (long long)a, (long long)b);
            return bs_error(BS_ERR_INPUT, "%s: field '%s': channel %lld is out of range, expected 0..%d", name, field,
                            (long long)(a < 0 ? a : b), limit - 1);
        }
        for (int64_t x = a; x <= b; x++) {
            if (n == cap) {
                cap *= 2;
                int *w = realloc(v, cap * sizeof *v);
                if (!w) {
                    free(v);
                    return bs_error(BS_ERR_MEMORY, "%s: out of memory reading '%s'", name, field);
                }
                v = w;
            }
            v[n++] = (int)x;
            if (n > (size_t)limit) {
                free(v);
                return bs_error(BS_ERR_INPUT, "%s: field '%s' lists more than %d channels (a channel is repeated)",
                                name, field, limit);
            }
        }
        while (*s == ' ')
            s++;
        if (*s == ',') {
            s++;
            while (*s == ' ')
                s++;
            if (!*s)
                goto bad;
        } else if (*s) {
            goto bad;
        }
    }
    *out = v;
    *n_out = (int)n;
    return BS_OK;
bad:
    free(v);
    return bs_error(BS_ERR_INPUT, "%s: field '%s': expected a list like 0:10,50:55,100, got '%.60s'", name, field,
                    text);
}
