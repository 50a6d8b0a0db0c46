/*
 * prb.c - the .prb reader of prb.h, and bs_probe_file_load.
 *
 * Two passes. (1) A recursive-descent parser for the Python literal subset
 * turns the text into values held in flat arrays: `vals` (one per literal),
 * `items` (the members of each list/tuple, and key/value index pairs of each
 * dict, stored contiguously once the container closes; a scratch stack
 * collects them while nested containers are being parsed) and a string pool
 * (decoded strings and names, at most 2 x input + 2 bytes since each string
 * comes from its own input bytes). Assignments go to a symbol table; a name
 * used as a value refers to the value it was last assigned (no copy). The
 * recursion depth is bounded by BS_PRB_MAX_DEPTH and range() expansions by
 * RANGE_BUDGET values in all, so any input costs bounded time and memory.
 * (2) The channel_groups value is walked group by group; each group's
 * geometry keys are sorted once so every channel's position is found by
 * binary search (no quadratic lookups), and the probe is filled and
 * validated. Value arrays come from the accountant (tag "io/prb-parse"),
 * the probe from bs_probe_alloc.
 */
#include "prb.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../common/fileio.h"
#include "../mem/mem.h"
#include "probe_json.h"

#define PRB_TAG "io/prb-parse"
#define RANGE_BUDGET (1 << 20) /* values expanded by range() in all */

typedef enum { V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NONE, V_BOOL } vkind;

typedef struct {
    vkind kind;
    int tuple;   /* V_LIST written as (...) */
    double num;  /* V_INT, V_FLOAT, V_BOOL */
    size_t str;  /* V_STR: offset into the pool */
    int first;   /* V_LIST: items[first .. first+count); V_DICT: key/value pairs items[first + 2i], [first + 2i + 1] */
    int count;
} val;

typedef struct {
    size_t name; /* pool offset */
    int value;   /* -1: empty slot */
} sym;

typedef struct {
    const char *name, *in, *p, *end;
    const char *line_pos;
    int line;
    val *vals;
    int n_vals, cap_vals;
    int *items;
    int n_items, cap_items;
    int *stack;
    int n_stack, cap_stack;
    char *pool;
    size_t pool_used, pool_cap;
    sym *syms;          /* open-addressing hash table of assigned names (cap_syms a power of 2) */
    int n_syms, cap_syms;
    int depth;
    long range_left;
} prb;

/* ---- growable arrays -------------------------------------------------------- */

static bs_status grow(void **arr, int *cap, int need, size_t elem, const char *name)
{
    if (need <= *cap)
        return BS_OK;
    if (need > INT_MAX / 2)
        return bs_error(BS_ERR_INPUT, "%s: too many values", name);
    int nc = *cap ? *cap : 256;
    while (nc < need)
        nc *= 2;
    void *na = bs_mem_realloc(*arr, PRB_TAG, (size_t)nc * elem);
    if (!na)
        return bs_error_context(BS_ERR_MEMORY, "%s", name);
    *arr = na;
    *cap = nc;
    return BS_OK;
}

static bs_status new_val(prb *ps, vkind kind, int *idx)
{
    BS_TRY(grow((void **)&ps->vals, &ps->cap_vals, ps->n_vals + 1, sizeof *ps->vals, ps->name));
    val *v = &ps->vals[ps->n_vals];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    *idx = ps->n_vals++;
    return BS_OK;
}

static bs_status push(prb *ps, int v)
{
    BS_TRY(grow((void **)&ps->stack, &ps->cap_stack, ps->n_stack + 1, sizeof *ps->stack, ps->name));
    ps->stack[ps->n_stack++] = v;
    return BS_OK;
}

/* Move stack[base..] to items as one container's members. */
static bs_status pop_to_items(prb *ps, int base, int *first, int *count)
{
    int n = ps->n_stack - base;
    BS_TRY(grow((void **)&ps->items, &ps->cap_items, ps->n_items + n, sizeof *ps->items, ps->name));
    if (n > 0) /* an empty container may come before any array exists */
        memcpy(ps->items + ps->n_items, ps->stack + base, (size_t)n * sizeof *ps->items);
    *first = ps->n_items;
    *count = n;
    ps->n_items += n;
    ps->n_stack = base;
    return BS_OK;
}

static const char *str_of(const prb *ps, const val *v)
{
    return ps->pool + v->str;
}

/* ---- messages ------------------------------------------------------------------ */

static void count_lines(prb *ps)
{
    for (const char *q = ps->line_pos; q < ps->p; q++)
        ps->line += *q == '\n';
    ps->line_pos = ps->p;
}

static bs_status syntax(prb *ps, const char *expected)
{
    count_lines(ps);
    char got[64];
    if (ps->p >= ps->end) {
        snprintf(got, sizeof got, "the end of the file");
    } else {
        size_t k = 0;
        got[k++] = '\'';
        for (const char *q = ps->p; q < ps->end && q < ps->p + 16 && *q != '\n' && k + 6 < sizeof got; q++) {
            unsigned char c = (unsigned char)*q;
            if (c < 0x20 || c == 0x7f)
                k += (size_t)snprintf(got + k, sizeof got - k, "\\x%02x", c);
            else
                got[k++] = (char)c;
        }
        got[k++] = '\'';
        got[k] = '\0';
    }
    return bs_error(BS_ERR_INPUT, "%s: line %d: expected %s, got %s", ps->name, ps->line, expected, got);
}

static const char *describe(const prb *ps, int idx, char *buf, size_t n)
{
    const val *v = &ps->vals[idx];
    switch (v->kind) {
    case V_INT: snprintf(buf, n, "the int %.17g", v->num); break;
    case V_FLOAT: snprintf(buf, n, "the float %.17g", v->num); break;
    case V_STR: snprintf(buf, n, "the string '%.40s'", str_of(ps, v)); break;
    case V_LIST: snprintf(buf, n, "a %s of %d values", v->tuple ? "tuple" : "list", v->count); break;
    case V_DICT: snprintf(buf, n, "a dict"); break;
    case V_NONE: snprintf(buf, n, "None"); break;
    case V_BOOL: snprintf(buf, n, "%s", v->num != 0 ? "True" : "False"); break;
    }
    return buf;
}

/* ---- the tokenizer ------------------------------------------------------------- */

/* Skip blanks, comments and backslash continuations; newlines too when
 * `newlines` (inside brackets). */
static void skip(prb *ps, int newlines)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || (newlines && c == '\n')) {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n')
                ps->p++;
        } else if (c == '\\' && ps->p + 1 < ps->end &&
                   (ps->p[1] == '\n' || (ps->p[1] == '\r' && ps->p + 2 < ps->end && ps->p[2] == '\n'))) {
            ps->p += ps->p[1] == '\n' ? 2 : 3;
        } else {
            break;
        }
    }
}

static int is_ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_ident(char c)
{
    return is_ident_start(c) || (c >= '0' && c <= '9');
}

/* An identifier at p: its start and length (0 if none). */
static size_t ident(const prb *ps, const char **start)
{
    *start = ps->p;
    const char *q = ps->p;
    if (q >= ps->end || !is_ident_start(*q))
        return 0;
    while (q < ps->end && is_ident(*q))
        q++;
    return (size_t)(q - ps->p);
}

static int ident_is(const char *s, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(s, word, n) == 0;
}

static size_t pool_put(prb *ps, const char *s, size_t n)
{
    size_t off = ps->pool_used;
    memcpy(ps->pool + off, s, n);
    ps->pool[off + n] = '\0';
    ps->pool_used += n + 1;
    return off;
}

/* ---- values -------------------------------------------------------------------- */

static bs_status parse_value(prb *ps, int *out);

static bs_status parse_number(prb *ps, int *out)
{
    const char *a = ps->p;
    char buf[128];
    size_t k = 0;
    int is_float = 0, digits = 0;
    while (ps->p < ps->end && k + 2 < sizeof buf) { /* room for an exponent's two characters and the NUL */
        char c = *ps->p;
        if (c >= '0' && c <= '9') {
            digits++;
            buf[k++] = c;
        } else if (c == '_' && digits > 0 && ps->p + 1 < ps->end && isdigit((unsigned char)ps->p[1])) {
            /* digit separator */
        } else if (c == '.') {
            is_float = 1;
            buf[k++] = c;
        } else if ((c == 'e' || c == 'E') && digits > 0) {
            is_float = 1;
            buf[k++] = c;
            if (ps->p + 1 < ps->end && (ps->p[1] == '-' || ps->p[1] == '+')) {
                ps->p++;
                buf[k++] = *ps->p;
            }
        } else {
            break;
        }
        ps->p++;
    }
    buf[k] = '\0';
    if (ps->p < ps->end && (is_ident(*ps->p) || *ps->p == '.')) { /* 0x10, 1j, 12abc, 1.2.3 */
        ps->p = a;
        return syntax(ps, "a decimal number");
    }
    char *end;
    double v = strtod(buf, &end);
    if (digits == 0 || *end != '\0' || !isfinite(v)) {
        ps->p = a;
        return syntax(ps, "a finite decimal number");
    }
    BS_TRY(new_val(ps, is_float ? V_FLOAT : V_INT, out));
    ps->vals[*out].num = v;
    return BS_OK;
}

static bs_status parse_string(prb *ps, int *out, int raw)
{
    char q = *ps->p;
    const char *start = ps->p;
    if (ps->p + 2 < ps->end && ps->p[1] == q && ps->p[2] == q)
        return syntax(ps, "a one-line string (triple-quoted strings are not supported)");
    ps->p++;
    size_t off = ps->pool_used;
    char *o = ps->pool + off;
    for (;;) {
        if (ps->p >= ps->end || *ps->p == '\n') {
            ps->p = start;
            return syntax(ps, "a string closed on the same line");
        }
        char c = *ps->p++;
        if (c == q)
            break;
        if (c == '\\' && !raw && ps->p < ps->end && *ps->p != '\n') {
            char e = *ps->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '0': c = '\0'; break;
            default: c = e; break; /* \\ \' \" and anything else: the character itself */
            }
            if (c == '\0')
                c = ' ';
        }
        *o++ = c;
    }
    *o = '\0';
    ps->pool_used = off + (size_t)(o - (ps->pool + off)) + 1;
    BS_TRY(new_val(ps, V_STR, out));
    ps->vals[*out].str = off;
    return BS_OK;
}

/* Items up to `close`, comma-separated, trailing comma allowed. dict: key ':' value. */
static bs_status parse_items(prb *ps, char close, int dict, int *first, int *count, int *trailing_comma)
{
    int base = ps->n_stack;
    *trailing_comma = 0;
    for (;;) {
        skip(ps, 1);
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            break;
        }
        int v;
        BS_TRY(parse_value(ps, &v));
        BS_TRY(push(ps, v));
        if (dict) {
            skip(ps, 1);
            if (ps->p >= ps->end || *ps->p != ':')
                return syntax(ps, "':' after the dict key");
            ps->p++;
            BS_TRY(parse_value(ps, &v));
            BS_TRY(push(ps, v));
        }
        skip(ps, 1);
        *trailing_comma = 0;
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            *trailing_comma = 1;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            break;
        }
        char exp[32];
        snprintf(exp, sizeof exp, "',' or '%c'", close);
        return syntax(ps, exp);
    }
    BS_TRY(pop_to_items(ps, base, first, count));
    if (dict)
        *count /= 2;
    return BS_OK;
}

static bs_status enter(prb *ps)
{
    if (++ps->depth > BS_PRB_MAX_DEPTH) {
        char exp[64];
        snprintf(exp, sizeof exp, "brackets nested at most %d deep", BS_PRB_MAX_DEPTH);
        return syntax(ps, exp);
    }
    return BS_OK;
}

/* range(...) after the name: expands into a list of ints. */
static bs_status parse_range(prb *ps, int *out)
{
    const char *at = ps->p;
    int first, count, tc;
    BS_TRY(enter(ps));
    ps->p++; /* '(' */
    BS_TRY(parse_items(ps, ')', 0, &first, &count, &tc));
    ps->depth--;
    double a[3] = {0, 0, 1};
    if (count < 1 || count > 3) {
        ps->p = at;
        return syntax(ps, "range(stop), range(start, stop) or range(start, stop, step)");
    }
    for (int i = 0; i < count; i++) {
        const val *v = &ps->vals[ps->items[first + i]];
        if (v->kind != V_INT || fabs(v->num) > 1e15) {
            ps->p = at;
            return syntax(ps, "range() of integers");
        }
    }
    if (count == 1) {
        a[1] = ps->vals[ps->items[first]].num;
    } else {
        a[0] = ps->vals[ps->items[first]].num;
        a[1] = ps->vals[ps->items[first + 1]].num;
        if (count == 3)
            a[2] = ps->vals[ps->items[first + 2]].num;
    }
    if (a[2] == 0) {
        ps->p = at;
        return syntax(ps, "a range() step other than 0");
    }
    double nd = ceil((a[1] - a[0]) / a[2]);
    long n = nd > 0 ? (long)nd : 0;
    if (n > ps->range_left) {
        ps->p = at;
        char exp[80];
        snprintf(exp, sizeof exp, "ranges of at most %d values in all", RANGE_BUDGET);
        return syntax(ps, exp);
    }
    ps->range_left -= n;
    int base = ps->n_stack;
    for (long i = 0; i < n; i++) {
        int v;
        BS_TRY(new_val(ps, V_INT, &v));
        ps->vals[v].num = a[0] + (double)i * a[2];
        BS_TRY(push(ps, v));
    }
    BS_TRY(new_val(ps, V_LIST, out));
    return pop_to_items(ps, base, &ps->vals[*out].first, &ps->vals[*out].count);
}

static uint64_t name_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

/* Slot of `name` in the table: where it is, or the empty slot where it goes. */
static int sym_slot(const prb *ps, const char *name, size_t n)
{
    int mask = ps->cap_syms - 1;
    for (int i = (int)(name_hash(name, n) & (uint64_t)mask);; i = (i + 1) & mask) {
        const sym *e = &ps->syms[i];
        if (e->value < 0)
            return i;
        const char *t = ps->pool + e->name;
        if (strncmp(t, name, n) == 0 && t[n] == '\0')
            return i;
    }
}

/* The value last assigned to `name`, or -1. */
static int lookup(const prb *ps, const char *name, size_t n)
{
    return ps->cap_syms ? ps->syms[sym_slot(ps, name, n)].value : -1;
}

static bs_status assign(prb *ps, const char *name, size_t n, int value)
{
    if (2 * (ps->n_syms + 1) > ps->cap_syms) { /* keep the table at most half full */
        int old_cap = ps->cap_syms, nc = old_cap ? 2 * old_cap : 64;
        sym *old = ps->syms;
        ps->syms = bs_mem_alloc(PRB_TAG, (size_t)nc * sizeof *ps->syms);
        if (!ps->syms) {
            ps->syms = old;
            return bs_error_context(BS_ERR_MEMORY, "%s", ps->name);
        }
        ps->cap_syms = nc;
        for (int i = 0; i < nc; i++)
            ps->syms[i].value = -1;
        for (int i = 0; i < old_cap; i++)
            if (old[i].value >= 0) {
                const char *t = ps->pool + old[i].name;
                ps->syms[sym_slot(ps, t, strlen(t))] = old[i];
            }
        bs_mem_free(old);
    }
    int slot = sym_slot(ps, name, n);
    if (ps->syms[slot].value < 0) {
        ps->syms[slot].name = pool_put(ps, name, n);
        ps->n_syms++;
    }
    ps->syms[slot].value = value;
    return BS_OK;
}

static bs_status parse_name_value(prb *ps, int *out)
{
    const char *s;
    size_t n = ident(ps, &s);
    const char *after = ps->p + n;
    const char *q = after;
    while (q < ps->end && (*q == ' ' || *q == '\t'))
        q++;
    int call = q < ps->end && *q == '(';
    if (!call && (ident_is(s, n, "True") || ident_is(s, n, "False"))) {
        ps->p = after;
        BS_TRY(new_val(ps, V_BOOL, out));
        ps->vals[*out].num = ident_is(s, n, "True");
        return BS_OK;
    }
    if (!call && ident_is(s, n, "None")) {
        ps->p = after;
        return new_val(ps, V_NONE, out);
    }
    if (call && ident_is(s, n, "range")) {
        ps->p = q;
        return parse_range(ps, out);
    }
    if (call && (ident_is(s, n, "list") || ident_is(s, n, "tuple"))) {
        ps->p = q + 1;
        BS_TRY(enter(ps));
        skip(ps, 1);
        const char *arg = ps->p;
        int v;
        BS_TRY(parse_value(ps, &v));
        if (ps->vals[v].kind != V_LIST) {
            ps->p = arg;
            return syntax(ps, "a list, tuple or range() inside list() or tuple()");
        }
        skip(ps, 1);
        if (ps->p < ps->end && *ps->p == ',') /* list(x,) */
            ps->p++;
        skip(ps, 1);
        if (ps->p >= ps->end || *ps->p != ')')
            return syntax(ps, "')' closing list() or tuple()");
        ps->p++;
        ps->depth--;
        *out = v;
        return BS_OK;
    }
    if (!call && (q >= ps->end || *q != '.')) {
        int v = lookup(ps, s, n);
        if (v >= 0) {
            ps->p = after;
            *out = v;
            return BS_OK;
        }
        char exp[96];
        snprintf(exp, sizeof exp, "a literal or a name assigned earlier (no '%.*s' so far)", (int)(n > 40 ? 40 : n), s);
        return syntax(ps, exp);
    }
    return syntax(ps, "a literal value (numbers, strings, lists, tuples, dicts, range()); other Python "
                      "expressions are not supported");
}

static bs_status parse_value(prb *ps, int *out)
{
    skip(ps, ps->depth > 0);
    if (ps->p >= ps->end)
        return syntax(ps, "a value");
    char c = *ps->p;
    if (c == '-' || c == '+') { /* signs (any number of them, as Python allows), then a number */
        int negate = 0;
        while (ps->p < ps->end && (*ps->p == '-' || *ps->p == '+')) {
            negate ^= *ps->p == '-';
            ps->p++;
            skip(ps, ps->depth > 0);
        }
        const char *at = ps->p;
        int v;
        BS_TRY(parse_value(ps, &v));
        if (ps->vals[v].kind != V_INT && ps->vals[v].kind != V_FLOAT) {
            ps->p = at;
            return syntax(ps, "a number after the sign");
        }
        if (negate) { /* a new value: a name may refer to v */
            int w;
            BS_TRY(new_val(ps, ps->vals[v].kind, &w));
            ps->vals[w].num = -ps->vals[v].num;
            v = w;
        }
        *out = v;
        return BS_OK;
    }
    if ((c >= '0' && c <= '9') || (c == '.' && ps->p + 1 < ps->end && isdigit((unsigned char)ps->p[1])))
        return parse_number(ps, out);
    if (c == '\'' || c == '"')
        return parse_string(ps, out, 0);
    if ((c == 'r' || c == 'R' || c == 'u' || c == 'U') && ps->p + 1 < ps->end &&
        (ps->p[1] == '\'' || ps->p[1] == '"')) {
        ps->p++;
        return parse_string(ps, out, c == 'r' || c == 'R');
    }
    if (c == '[' || c == '(' || c == '{') {
        BS_TRY(enter(ps));
        ps->p++;
        int first, count, tc;
        char close = c == '[' ? ']' : c == '(' ? ')' : '}';
        BS_TRY(parse_items(ps, close, c == '{', &first, &count, &tc));
        ps->depth--;
        if (c == '(' && count == 1 && !tc) { /* (x) is x */
            *out = ps->items[first];
            return BS_OK;
        }
        BS_TRY(new_val(ps, c == '{' ? V_DICT : V_LIST, out));
        val *v = &ps->vals[*out];
        v->tuple = c == '(';
        v->first = first;
        v->count = count;
        return BS_OK;
    }
    if (is_ident_start(c))
        return parse_name_value(ps, out);
    return syntax(ps, "a value");
}

/* Statements until the end of the text. */
static bs_status parse_file(prb *ps)
{
    for (;;) {
        skip(ps, 1);
        if (ps->p >= ps->end)
            return BS_OK;
        if (*ps->p == ';') {
            ps->p++;
            continue;
        }
        const char *s;
        size_t n = ident(ps, &s);
        if (n == 0)
            return syntax(ps, "a statement NAME = value");
        if (ident_is(s, n, "import") || ident_is(s, n, "from")) {
            while (ps->p < ps->end && *ps->p != '\n')
                ps->p++;
            continue;
        }
        ps->p += n;
        skip(ps, 0);
        if (ps->p >= ps->end || *ps->p != '=' || (ps->p + 1 < ps->end && ps->p[1] == '=')) {
            ps->p = s;
            return syntax(ps, "a statement NAME = value (other Python statements are not supported)");
        }
        ps->p++;
        int v;
        BS_TRY(parse_value(ps, &v));
        skip(ps, 0);
        if (ps->p < ps->end && *ps->p != '\n' && *ps->p != ';')
            return syntax(ps, "the end of the line after the value");
        BS_TRY(assign(ps, s, n, v));
    }
}

/* ---- meaning ---------------------------------------------------------------------- */

/* dict[key] for a string key (the last match), or -1. */
static int dict_get(const prb *ps, int dict, const char *key)
{
    const val *d = &ps->vals[dict];
    for (int i = d->count - 1; i >= 0; i--) {
        const val *k = &ps->vals[ps->items[d->first + 2 * i]];
        if (k->kind == V_STR && strcmp(str_of(ps, k), key) == 0)
            return ps->items[d->first + 2 * i + 1];
    }
    return -1;
}

/* An int value, or a string holding an int: 1 and its value. */
static int int_of(const prb *ps, int idx, double *out)
{
    const val *v = &ps->vals[idx];
    if (v->kind == V_INT || (v->kind == V_FLOAT && v->num == floor(v->num))) {
        *out = v->num;
        return 1;
    }
    if (v->kind == V_STR) {
        const char *s = str_of(ps, v);
        char *end;
        double x = strtod(s, &end);
        if (end != s && *end == '\0' && isfinite(x) && x == floor(x) && strpbrk(s, "xXnN") == NULL) {
            *out = x;
            return 1;
        }
    }
    return 0;
}

typedef struct {
    double key;
    int order; /* position in the dict: the last of equal keys wins */
    int value;
} geo_entry;

static int geo_cmp(const void *a, const void *b)
{
    const geo_entry *s = a, *t = b;
    if (s->key != t->key)
        return s->key < t->key ? -1 : 1;
    return (s->order > t->order) - (s->order < t->order);
}

typedef struct {
    char text[64]; /* key as text */
    double num;
    int is_int;
    int group; /* group's position in the file */
} group_key;

static _Thread_local int g_numeric_keys;

static int group_key_cmp(const void *a, const void *b)
{
    const group_key *s = a, *t = b;
    int c = g_numeric_keys ? (s->num > t->num) - (s->num < t->num) : strcmp(s->text, t->text);
    return c ? c : (s->group > t->group) - (s->group < t->group);
}

static bs_status group_label(const prb *ps, int key, int g, group_key *out)
{
    const val *k = &ps->vals[key];
    out->group = g;
    out->is_int = int_of(ps, key, &out->num);
    if (k->kind == V_STR)
        snprintf(out->text, sizeof out->text, "%s", str_of(ps, k));
    else if (out->is_int)
        snprintf(out->text, sizeof out->text, "%.17g", out->num);
    else {
        char d[64];
        return bs_error(BS_ERR_INPUT, "%s: channel_groups: group %d: expected an int or a string as the group key, got %s",
                        ps->name, g, describe(ps, key, d, sizeof d));
    }
    return BS_OK;
}

static bs_status build_probe(prb *ps, int probe_index, bs_probe *p, int *required_cols)
{
    char d[64];
    if (probe_index != 0)
        return bs_error(BS_ERR_INPUT,
                        "%s: a .prb file describes one probe (its channel groups are shanks): probe index %d does "
                        "not exist, expected 0",
                        ps->name, probe_index);
    int cg = lookup(ps, "channel_groups", strlen("channel_groups"));
    if (cg < 0)
        return bs_error(BS_ERR_INPUT, "%s: no 'channel_groups = {...}' assignment: expected a .prb probe file",
                        ps->name);
    const val *groups = &ps->vals[cg];
    if (groups->kind != V_DICT)
        return bs_error(BS_ERR_INPUT, "%s: channel_groups: expected a dict {group: {'channels': ..., 'geometry': "
                                      "...}}, got %s",
                        ps->name, describe(ps, cg, d, sizeof d));
    int G = groups->count;
    if (G == 0)
        return bs_error(BS_ERR_INPUT, "%s: channel_groups: expected at least one group, got an empty dict", ps->name);
    /* count channels, check each group's shape */
    long total = 0;
    for (int g = 0; g < G; g++) {
        int gv = ps->items[groups->first + 2 * g + 1];
        group_key label;
        BS_TRY(group_label(ps, ps->items[groups->first + 2 * g], g, &label));
        if (ps->vals[gv].kind != V_DICT)
            return bs_error(BS_ERR_INPUT, "%s: channel_groups[%s]: expected a dict with 'channels' and 'geometry', got %s",
                            ps->name, label.text, describe(ps, gv, d, sizeof d));
        int geo = dict_get(ps, gv, "geometry");
        int ch = dict_get(ps, gv, "channels");
        if (geo < 0)
            return bs_error(BS_ERR_INPUT, "%s: channel_groups[%s]: missing 'geometry': expected {channel: (x, y)} in µm",
                            ps->name, label.text);
        if (ps->vals[geo].kind != V_DICT)
            return bs_error(BS_ERR_INPUT, "%s: channel_groups[%s]['geometry']: expected a dict {channel: (x, y)}, got %s",
                            ps->name, label.text, describe(ps, geo, d, sizeof d));
        if (ch >= 0 && ps->vals[ch].kind != V_LIST)
            return bs_error(BS_ERR_INPUT, "%s: channel_groups[%s]['channels']: expected a list of channel numbers, got %s",
                            ps->name, label.text, describe(ps, ch, d, sizeof d));
        total += ch >= 0 ? ps->vals[ch].count : ps->vals[geo].count;
    }
    if (total == 0)
        return bs_error(BS_ERR_INPUT, "%s: channel_groups: expected at least one channel, got none", ps->name);
    if (total > INT_MAX / 2)
        return bs_error(BS_ERR_INPUT, "%s: channel_groups: too many channels (%ld)", ps->name, total);

    BS_TRY(bs_probe_alloc(p, (int)total));
    group_key *keys = bs_mem_calloc(PRB_TAG, (size_t)G, sizeof *keys);
    int *group_of = bs_mem_calloc(PRB_TAG, (size_t)total, sizeof *group_of);
    geo_entry *ge = NULL;
    bs_status st = (keys && group_of) ? BS_OK : BS_ERR_MEMORY;
    int k = 0, max_col = -1;
    for (int g = 0; g < G && st == BS_OK; g++) {
        int gv = ps->items[groups->first + 2 * g + 1];
        st = group_label(ps, ps->items[groups->first + 2 * g], g, &keys[g]);
        if (st != BS_OK)
            break;
        const char *gl = keys[g].text;
        int geo = dict_get(ps, gv, "geometry");
        int ch = dict_get(ps, gv, "channels");
        const val *gd = &ps->vals[geo];
        /* geometry keys, sorted */
        bs_mem_free(ge);
        ge = bs_mem_alloc(PRB_TAG, (size_t)(gd->count ? gd->count : 1) * sizeof *ge);
        if (!ge) {
            st = BS_ERR_MEMORY;
            break;
        }
        for (int i = 0; i < gd->count && st == BS_OK; i++) {
            int kv = ps->items[gd->first + 2 * i];
            if (!int_of(ps, kv, &ge[i].key))
                st = bs_error(BS_ERR_INPUT, "%s: channel_groups[%s]['geometry']: expected channel numbers as keys, got %s",
                              ps->name, gl, describe(ps, kv, d, sizeof d));
            ge[i].order = i;
            ge[i].value = ps->items[gd->first + 2 * i + 1];
        }
        if (st != BS_OK)
            break;
        qsort(ge, (size_t)gd->count, sizeof *ge, geo_cmp);
        int n = ch >= 0 ? ps->vals[ch].count : gd->count;
        for (int i = 0; i < n && st == BS_OK; i++) {
            double c;
            int cv = ch >= 0 ? ps->items[ps->vals[ch].first + i] : ps->items[gd->first + 2 * i];
            if (ch < 0 && int_of(ps, cv, &c)) { /* a repeated key keeps its first place (Python dict order) */
                int lo = 0, hi = gd->count;
                while (lo < hi) {
                    int mid = lo + (hi - lo) / 2;
                    if (ge[mid].key < c)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                if (ge[lo].order != i)
                    continue;
            }
            if (!int_of(ps, cv, &c) || c < 0 || c > INT_MAX - 1) {
                st = bs_error(BS_ERR_INPUT, "%s: channel_groups[%s]['%s'][%d]: expected a channel number >= 0, got %s",
                              ps->name, gl, ch >= 0 ? "channels" : "geometry", i, describe(ps, cv, d, sizeof d));
                break;
            }
            /* the last geometry entry with key c */
            int lo = 0, hi = gd->count;
            while (lo < hi) {
                int mid = lo + (hi - lo) / 2;
                if (ge[mid].key <= c)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo == 0 || ge[lo - 1].key != c) {
                st = bs_error(BS_ERR_INPUT, "%s: channel_groups[%s]['geometry']: no position for channel %d", ps->name,
                              gl, (int)c);
                break;
            }
            int pv = ge[lo - 1].value;
            const val *pos = &ps->vals[pv];
            int ok = pos->kind == V_LIST && pos->count >= 2 && pos->count <= 3;
            for (int j = 0; ok && j < pos->count; j++) {
                vkind kj = ps->vals[ps->items[pos->first + j]].kind;
                ok = kj == V_INT || kj == V_FLOAT;
            }
            if (!ok) {
                st = bs_error(BS_ERR_INPUT,
                              "%s: channel_groups[%s]['geometry'][%d]: expected a position (x, y) of numbers in µm, got %s",
                              ps->name, gl, (int)c, describe(ps, pv, d, sizeof d));
                break;
            }
            p->column[k] = (int)c;
            p->x_um[k] = ps->vals[ps->items[pos->first]].num;
            p->y_um[k] = ps->vals[ps->items[pos->first + 1]].num;
            group_of[k] = g;
            if ((int)c > max_col)
                max_col = (int)c;
            k++;
        }
    }
    if (st == BS_OK)
        p->n_chan = k; /* repeated geometry keys may have been skipped */
    if (st == BS_OK) { /* shank = rank of the group key */
        g_numeric_keys = 1;
        for (int g = 0; g < G; g++)
            if (!keys[g].is_int)
                g_numeric_keys = 0;
        qsort(keys, (size_t)G, sizeof *keys, group_key_cmp);
        int *rank = bs_mem_alloc(PRB_TAG, (size_t)G * sizeof *rank);
        if (!rank) {
            st = BS_ERR_MEMORY;
        } else {
            int r = 0;
            for (int i = 0; i < G; i++) {
                if (i > 0 && (g_numeric_keys ? keys[i].num != keys[i - 1].num
                                             : strcmp(keys[i].text, keys[i - 1].text) != 0))
                    r++;
                rank[keys[i].group] = r;
            }
            for (int i = 0; i < k; i++)
                p->shank[i] = rank[group_of[i]];
            p->n_shanks = r + 1;
            bs_mem_free(rank);
        }
    }
    int required = max_col + 1;
    int tn = st == BS_OK ? lookup(ps, "total_nb_channels", strlen("total_nb_channels")) : -1;
    if (tn >= 0) {
        double t;
        if (!int_of(ps, tn, &t) || ps->vals[tn].kind == V_STR || t < 1 || t > INT_MAX - 1)
            st = bs_error(BS_ERR_INPUT, "%s: total_nb_channels: expected the number of columns in the binary (an int "
                                        ">= 1), got %s",
                          ps->name, describe(ps, tn, d, sizeof d));
        else if ((int)t < required)
            st = bs_error(BS_ERR_INPUT, "%s: total_nb_channels is %d but channel %d is used: expected at least %d",
                          ps->name, (int)t, max_col, required);
        else
            required = (int)t;
    }
    bs_mem_free(keys);
    bs_mem_free(group_of);
    bs_mem_free(ge);
    if (st == BS_OK)
        st = bs_probe_validate(p, required, ps->name);
    if (st != BS_OK) {
        bs_probe_free(p);
        return st;
    }
    if (required_cols)
        *required_cols = required;
    return BS_OK;
}

bs_status bs_prb_parse(const char *text, size_t len, const char *name, int probe_index, bs_probe *p,
                       int *required_cols)
{
    memset(p, 0, sizeof *p);
    if (required_cols)
        *required_cols = 0;
    if (len > BS_PRB_MAX_BYTES)
        return bs_error(BS_ERR_INPUT, "%s: expected a .prb file of at most %zu bytes, got %zu bytes", name,
                        BS_PRB_MAX_BYTES, len);
    const char *nul = len ? memchr(text, '\0', len) : NULL;
    if (nul)
        return bs_error(BS_ERR_INPUT, "%s: expected Python text, got a NUL byte at offset %zu", name,
                        (size_t)(nul - text));
    prb ps;
    memset(&ps, 0, sizeof ps);
    ps.name = name;
    ps.in = ps.p = ps.line_pos = text;
    ps.end = text + len;
    ps.line = 1;
    ps.range_left = RANGE_BUDGET;
    ps.pool_cap = 2 * len + 2;
    ps.pool = bs_mem_alloc(PRB_TAG, ps.pool_cap);
    bs_status st = ps.pool ? parse_file(&ps) : bs_error_context(BS_ERR_MEMORY, "%s", name);
    if (st == BS_OK)
        st = build_probe(&ps, probe_index, p, required_cols);
    bs_mem_free(ps.pool);
    bs_mem_free(ps.vals);
    bs_mem_free(ps.items);
    bs_mem_free(ps.stack);
    bs_mem_free(ps.syms);
    return st;
}

bs_status bs_prb_load(const char *path, int probe_index, bs_probe *p, int *required_cols)
{
    memset(p, 0, sizeof *p);
    char *text = NULL;
    size_t len = 0;
    bs_status st = bs_read_text_file(path, BS_PRB_MAX_BYTES, &text, &len);
    if (st != BS_OK)
        return bs_error_context(st, "probe file");
    st = bs_prb_parse(text, len, path, probe_index, p, required_cols);
    free(text);
    return st;
}

bs_status bs_probe_file_load(const char *path, int probe_index, bs_probe *p, int *required_cols)
{
    size_t n = strlen(path);
    if (n >= 4 && strcasecmp(path + n - 4, ".prb") == 0)
        return bs_prb_load(path, probe_index, p, required_cols);
    return bs_probe_json_load(path, probe_index, p, required_cols);
}
