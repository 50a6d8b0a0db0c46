/*
 * xml.c - the XML reader of xml.h.
 *
 * One pass over the input with a cursor. Markup is recognised by its first
 * bytes ("<?", "<!--", "<![CDATA[", "<!", "</", "<"); everything else up to
 * the next '<' is character data. Open elements form a chain through
 * bs_xml_node.parent (the "current" element), so nesting needs no recursion;
 * the depth is counted and bounded. Every name, value and text is copied
 * (references decoded) into one pool sized 2 x input + 2 bytes: each copied
 * string comes from its own input bytes (at least as many as its decoded
 * length, and at least one per string for the NUL), so the pool never
 * overflows. Node and attribute arrays grow geometrically through the
 * accountant. Line numbers for messages are counted only when an error is
 * reported.
 */
#include "xml.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/fileio.h"
#include "../mem/mem.h"

#define XML_TAG "io/xml"

typedef struct {
    const char *in, *p, *end;
    bs_xml_doc *doc;
    size_t pool_used, pool_cap;
    int cap_nodes, cap_attrs;
    const char *line_pos; /* lines are counted up to here ... */
    int line;             /* ... where this line starts or continues */
} parser;

/* 1-based line of `at`. Counting resumes from the last position asked for, so
 * the start tags of a document cost one pass in total. */
static int line_of(parser *ps, const char *at)
{
    if (at > ps->end)
        at = ps->end;
    if (at < ps->line_pos) {
        ps->line_pos = ps->in;
        ps->line = 1;
    }
    for (const char *q = ps->line_pos; q < at; q++)
        ps->line += *q == '\n';
    ps->line_pos = at;
    return ps->line;
}

/* Describe the bytes at `at` for a message: "'<abc'" or "the end of the file". */
static const char *got(const parser *ps, const char *at, char *buf, size_t n)
{
    if (at >= ps->end) {
        snprintf(buf, n, "the end of the file");
        return buf;
    }
    size_t k = 0;
    buf[k++] = '\'';
    for (const char *q = at; q < ps->end && q < at + 12 && k + 6 < n; q++) {
        unsigned char c = (unsigned char)*q;
        if (c < 0x20 || c == 0x7f)
            k += (size_t)snprintf(buf + k, n - k, "\\x%02x", c);
        else
            buf[k++] = (char)c;
    }
    buf[k++] = '\'';
    buf[k] = '\0';
    return buf;
}

static bs_status fail(parser *ps, const char *at, const char *expected)
{
    char g[96];
    return bs_error(BS_ERR_INPUT, "%s: line %d: expected %s, got %s", ps->doc->name, line_of(ps, at), expected,
                    got(ps, at, g, sizeof g));
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_name_char(char ch)
{
    unsigned char c = (unsigned char)ch;
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == ':' ||
           c == '.' || c == '-' || c >= 0x80;
}

static void skip_blanks(parser *ps)
{
    while (ps->p < ps->end && is_blank(*ps->p))
        ps->p++;
}

static int starts(const parser *ps, const char *s)
{
    size_t n = strlen(s);
    return (size_t)(ps->end - ps->p) >= n && memcmp(ps->p, s, n) == 0;
}

/* Position of `s` at or after p, or NULL. */
static const char *find(const parser *ps, const char *s)
{
    size_t n = strlen(s);
    for (const char *q = ps->p; (size_t)(ps->end - q) >= n; q++)
        if (*q == s[0] && memcmp(q, s, n) == 0)
            return q;
    return NULL;
}

/* ---- the pool --------------------------------------------------------------- */

static char *pool_put(parser *ps, const char *s, size_t n)
{
    char *dst = ps->doc->pool + ps->pool_used;
    memcpy(dst, s, n);
    dst[n] = '\0';
    ps->pool_used += n + 1;
    return dst;
}

static void put_utf8(char **o, uint32_t cp)
{
    unsigned char *u = (unsigned char *)*o;
    if (cp < 0x80) {
        *u++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *u++ = (unsigned char)(0xc0 | (cp >> 6));
        *u++ = (unsigned char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *u++ = (unsigned char)(0xe0 | (cp >> 12));
        *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        *u++ = (unsigned char)(0x80 | (cp & 0x3f));
    } else {
        *u++ = (unsigned char)(0xf0 | (cp >> 18));
        *u++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        *u++ = (unsigned char)(0x80 | (cp & 0x3f));
    }
    *o = (char *)u;
}

/* Copy [a, b) into the pool with references decoded. A reference never
 * decodes to more bytes than it occupies ("&#N;" with N >= 0x10000 has at
 * least 8 bytes and gives 4). */
static bs_status pool_decode(parser *ps, const char *a, const char *b, const char **out)
{
    char *start = ps->doc->pool + ps->pool_used, *o = start;
    for (const char *q = a; q < b;) {
        if (*q != '&') {
            *o++ = *q++;
            continue;
        }
        const char *semi = q + 1;
        while (semi < b && semi - q <= 12 && *semi != ';')
            semi++;
        if (semi >= b || *semi != ';')
            return fail(ps, q, "a reference like &amp; or &#60;");
        size_t n = (size_t)(semi - q - 1);
        const char *e = q + 1;
        if (n == 2 && memcmp(e, "lt", 2) == 0) {
            *o++ = '<';
        } else if (n == 2 && memcmp(e, "gt", 2) == 0) {
            *o++ = '>';
        } else if (n == 3 && memcmp(e, "amp", 3) == 0) {
            *o++ = '&';
        } else if (n == 4 && memcmp(e, "quot", 4) == 0) {
            *o++ = '"';
        } else if (n == 4 && memcmp(e, "apos", 4) == 0) {
            *o++ = '\'';
        } else if (n >= 2 && e[0] == '#') {
            int hex = e[1] == 'x';
            const char *d = e + 1 + hex;
            uint32_t cp = 0;
            if (d >= semi)
                return fail(ps, q, "a character reference with digits");
            for (; d < semi; d++) {
                int v;
                if (*d >= '0' && *d <= '9')
                    v = *d - '0';
                else if (hex && *d >= 'a' && *d <= 'f')
                    v = *d - 'a' + 10;
                else if (hex && *d >= 'A' && *d <= 'F')
                    v = *d - 'A' + 10;
                else
                    return fail(ps, q, "a character reference with digits");
                cp = cp * (hex ? 16u : 10u) + (uint32_t)v;
                if (cp > 0x10ffff)
                    break;
            }
            if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return fail(ps, q, "a character reference to a Unicode character");
            put_utf8(&o, cp);
        } else {
            return fail(ps, q, "one of the references &lt; &gt; &amp; &quot; &apos; &#N;");
        }
        q = semi + 1;
    }
    *o = '\0';
    ps->pool_used += (size_t)(o - start) + 1;
    *out = start;
    return BS_OK;
}

/* ---- nodes ------------------------------------------------------------------ */

static bs_status new_node(parser *ps, const char *name, int parent, int line, int *idx)
{
    bs_xml_doc *d = ps->doc;
    if (d->n_nodes == ps->cap_nodes) {
        int nc = ps->cap_nodes ? 2 * ps->cap_nodes : 256;
        bs_xml_node *nn = bs_mem_realloc(d->nodes, XML_TAG, (size_t)nc * sizeof *nn);
        if (!nn)
            return bs_error_context(BS_ERR_MEMORY, "%s", d->name);
        d->nodes = nn;
        ps->cap_nodes = nc;
    }
    int k = d->n_nodes++;
    bs_xml_node *n = &d->nodes[k];
    n->name = name;
    n->text = "";
    n->parent = parent;
    n->first_child = -1;
    n->next_sibling = -1;
    n->subtree_end = k + 1;
    n->attr_first = d->n_attrs;
    n->attr_count = 0;
    n->line = line;
    if (parent >= 0) { /* append to the parent's children: find the last child */
        bs_xml_node *pn = &d->nodes[parent];
        if (pn->first_child < 0) {
            pn->first_child = k;
        } else {
            /* the previous sibling is the most recent child of parent: walk from
             * the last node created up its parent chain until parent */
            int c = k - 1;
            while (d->nodes[c].parent != parent)
                c = d->nodes[c].parent;
            d->nodes[c].next_sibling = k;
        }
    }
    *idx = k;
    return BS_OK;
}

static bs_status new_attr(parser *ps, const char *name, const char *value)
{
    bs_xml_doc *d = ps->doc;
    if (d->n_attrs == ps->cap_attrs) {
        int nc = ps->cap_attrs ? 2 * ps->cap_attrs : 1024;
        bs_xml_attr *na = bs_mem_realloc(d->attrs, XML_TAG, (size_t)nc * sizeof *na);
        if (!na)
            return bs_error_context(BS_ERR_MEMORY, "%s", d->name);
        d->attrs = na;
        ps->cap_attrs = nc;
    }
    d->attrs[d->n_attrs].name = name;
    d->attrs[d->n_attrs].value = value;
    d->n_attrs++;
    return BS_OK;
}

/* A name at p (copied to the pool), or an error naming what was expected. */
static bs_status read_name(parser *ps, const char *what, const char **out)
{
    const char *a = ps->p;
    while (ps->p < ps->end && is_name_char(*ps->p))
        ps->p++;
    if (ps->p == a || (*a >= '0' && *a <= '9') || *a == '-' || *a == '.')
        return fail(ps, a, what);
    *out = pool_put(ps, a, (size_t)(ps->p - a));
    return BS_OK;
}

/* ---- the parser ------------------------------------------------------------- */

static bs_status parse(parser *ps)
{
    bs_xml_doc *d = ps->doc;
    int cur = -1, depth = 0, root_done = 0;
    while (ps->p < ps->end) {
        const char *at = ps->p;
        if (*at != '<') { /* character data */
            const char *lt = memchr(at, '<', (size_t)(ps->end - at));
            const char *stop = lt ? lt : ps->end;
            const char *a = at, *b = stop;
            while (a < b && is_blank(*a))
                a++;
            while (b > a && is_blank(b[-1]))
                b--;
            if (a < b) {
                if (cur < 0)
                    return fail(ps, a, root_done ? "nothing but comments after the root element"
                                                 : "'<' starting the root element");
                if (d->nodes[cur].text[0] == '\0')
                    BS_TRY(pool_decode(ps, a, b, &d->nodes[cur].text));
                else { /* later runs are ignored, but their references must still be valid */
                    const char *tmp;
                    size_t used = ps->pool_used;
                    BS_TRY(pool_decode(ps, a, b, &tmp));
                    ps->pool_used = used;
                }
            }
            ps->p = stop;
            continue;
        }
        if (starts(ps, "<?")) {
            ps->p += 2;
            const char *e = find(ps, "?>");
            if (!e)
                return fail(ps, at, "'?>' closing the processing instruction opened here");
            ps->p = e + 2;
        } else if (starts(ps, "<!--")) {
            ps->p += 4;
            const char *e = find(ps, "-->");
            if (!e)
                return fail(ps, at, "'-->' closing the comment opened here");
            ps->p = e + 3;
        } else if (starts(ps, "<![CDATA[")) {
            if (cur < 0)
                return fail(ps, at, "a CDATA section inside an element");
            ps->p += 9;
            const char *e = find(ps, "]]>");
            if (!e)
                return fail(ps, at, "']]>' closing the CDATA section opened here");
            const char *a = ps->p, *b = e;
            while (a < b && is_blank(*a))
                a++;
            while (b > a && is_blank(b[-1]))
                b--;
            if (a < b && d->nodes[cur].text[0] == '\0')
                d->nodes[cur].text = pool_put(ps, a, (size_t)(b - a));
            ps->p = e + 3;
        } else if (starts(ps, "<!")) { /* <!DOCTYPE ...> with an optional [internal subset] */
            if (cur >= 0 || root_done || d->n_nodes > 0)
                return fail(ps, at, "a declaration (<!DOCTYPE ...>) before the root element only");
            ps->p += 2;
            int bracket = 0;
            while (ps->p < ps->end && (bracket > 0 || *ps->p != '>')) {
                if (*ps->p == '[')
                    bracket++;
                else if (*ps->p == ']' && bracket > 0)
                    bracket--;
                ps->p++;
            }
            if (ps->p >= ps->end)
                return fail(ps, at, "'>' closing the declaration opened here");
            ps->p++;
        } else if (starts(ps, "</")) {
            ps->p += 2;
            const char *name;
            const char *name_at = ps->p;
            BS_TRY(read_name(ps, "an element name after '</'", &name));
            skip_blanks(ps);
            if (ps->p >= ps->end || *ps->p != '>')
                return fail(ps, ps->p, "'>' ending the closing tag");
            ps->p++;
            if (cur < 0)
                return fail(ps, name_at, "no closing tag outside the root element");
            if (strcmp(name, d->nodes[cur].name) != 0) {
                char exp[200];
                snprintf(exp, sizeof exp, "</%.64s> closing the element opened on line %d", d->nodes[cur].name,
                         d->nodes[cur].line);
                return fail(ps, at, exp);
            }
            ps->pool_used -= strlen(name) + 1; /* the closing name is not kept */
            d->nodes[cur].subtree_end = d->n_nodes;
            cur = d->nodes[cur].parent;
            depth--;
            if (cur < 0)
                root_done = 1;
        } else { /* a start tag */
            if (root_done)
                return fail(ps, at, "nothing but comments after the root element");
            ps->p++;
            const char *name;
            BS_TRY(read_name(ps, "an element name after '<'", &name));
            if (depth >= BS_XML_MAX_DEPTH) {
                char exp[96];
                snprintf(exp, sizeof exp, "elements nested at most %d deep", BS_XML_MAX_DEPTH);
                return fail(ps, at, exp);
            }
            int k = -1;
            BS_TRY(new_node(ps, name, cur, line_of(ps, at), &k));
            for (;;) {
                const char *before = ps->p;
                skip_blanks(ps);
                if (ps->p >= ps->end)
                    return fail(ps, ps->p, "'>' ending the start tag");
                if (*ps->p == '/') {
                    if (ps->p + 1 >= ps->end || ps->p[1] != '>')
                        return fail(ps, ps->p, "'/>' ending the empty element");
                    ps->p += 2;
                    if (cur < 0)
                        root_done = 1;
                    break;
                }
                if (*ps->p == '>') {
                    ps->p++;
                    cur = k;
                    depth++;
                    break;
                }
                if (ps->p == before)
                    return fail(ps, ps->p, "a blank before the attribute name");
                const char *an, *av;
                BS_TRY(read_name(ps, "an attribute name, '>' or '/>'", &an));
                skip_blanks(ps);
                if (ps->p >= ps->end || *ps->p != '=')
                    return fail(ps, ps->p, "'=' after the attribute name");
                ps->p++;
                skip_blanks(ps);
                if (ps->p >= ps->end || (*ps->p != '"' && *ps->p != '\''))
                    return fail(ps, ps->p, "a quoted attribute value");
                char q = *ps->p++;
                const char *e = memchr(ps->p, q, (size_t)(ps->end - ps->p));
                if (!e)
                    return fail(ps, ps->p - 1, "the closing quote of the attribute value");
                BS_TRY(pool_decode(ps, ps->p, e, &av));
                ps->p = e + 1;
                BS_TRY(new_attr(ps, an, av));
                d->nodes[k].attr_count++;
            }
        }
    }
    if (cur >= 0) {
        char exp[160];
        snprintf(exp, sizeof exp, "</%.64s> closing the element opened on line %d", d->nodes[cur].name,
                 d->nodes[cur].line);
        return fail(ps, ps->end, exp);
    }
    if (d->n_nodes == 0)
        return bs_error(BS_ERR_INPUT, "%s: expected an XML root element, got %s", d->name,
                        ps->end == ps->in ? "an empty file" : "none");
    return BS_OK;
}

bs_status bs_xml_parse(const char *text, size_t len, const char *name, bs_xml_doc *doc)
{
    memset(doc, 0, sizeof *doc);
    snprintf(doc->name, sizeof doc->name, "%s", name);
    if (len > BS_XML_MAX_BYTES)
        return bs_error(BS_ERR_INPUT, "%s: expected an XML file of at most %zu bytes, got %zu bytes", name,
                        BS_XML_MAX_BYTES, len);
    const char *nul = len ? memchr(text, '\0', len) : NULL;
    if (nul)
        return bs_error(BS_ERR_INPUT, "%s: expected XML text, got a NUL byte at offset %zu", name,
                        (size_t)(nul - text));
    parser ps = {text, text, text + len, doc, 0, 2 * len + 2, 0, 0, text, 1};
    doc->pool = bs_mem_alloc(XML_TAG, ps.pool_cap);
    if (!doc->pool)
        return bs_error_context(BS_ERR_MEMORY, "%s", name);
    /* a byte-order mark */
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        ps.p += 3;
    bs_status st = parse(&ps);
    if (st != BS_OK) {
        char keep[512];
        snprintf(keep, sizeof keep, "%s", doc->name);
        bs_xml_free(doc);
        snprintf(doc->name, sizeof doc->name, "%s", keep);
    }
    return st;
}

bs_status bs_xml_read(const char *path, bs_xml_doc *doc)
{
    memset(doc, 0, sizeof *doc);
    char *text = NULL;
    size_t len = 0;
    BS_TRY(bs_read_text_file(path, BS_XML_MAX_BYTES, &text, &len));
    bs_status st = bs_xml_parse(text, len, path, doc);
    free(text);
    return st;
}

void bs_xml_free(bs_xml_doc *doc)
{
    if (!doc)
        return;
    bs_mem_free(doc->pool);
    bs_mem_free(doc->nodes);
    bs_mem_free(doc->attrs);
    memset(doc, 0, sizeof *doc);
}

int bs_xml_child(const bs_xml_doc *doc, int node, const char *name)
{
    if (node < 0 || node >= doc->n_nodes)
        return -1;
    for (int c = doc->nodes[node].first_child; c >= 0; c = doc->nodes[c].next_sibling)
        if (!name || strcmp(doc->nodes[c].name, name) == 0)
            return c;
    return -1;
}

int bs_xml_next(const bs_xml_doc *doc, int node, const char *name)
{
    if (node < 0 || node >= doc->n_nodes)
        return -1;
    for (int c = doc->nodes[node].next_sibling; c >= 0; c = doc->nodes[c].next_sibling)
        if (!name || strcmp(doc->nodes[c].name, name) == 0)
            return c;
    return -1;
}

int bs_xml_find(const bs_xml_doc *doc, int scope, int from, const char *name)
{
    if (scope < 0 || scope >= doc->n_nodes || from < scope)
        return -1;
    for (int i = from + 1; i < doc->nodes[scope].subtree_end; i++)
        if (strcmp(doc->nodes[i].name, name) == 0)
            return i;
    return -1;
}

const char *bs_xml_attr_get(const bs_xml_doc *doc, int node, const char *name)
{
    if (node < 0 || node >= doc->n_nodes)
        return NULL;
    const bs_xml_node *n = &doc->nodes[node];
    for (int a = 0; a < n->attr_count; a++)
        if (strcmp(doc->attrs[n->attr_first + a].name, name) == 0)
            return doc->attrs[n->attr_first + a].value;
    return NULL;
}
