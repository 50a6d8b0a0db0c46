/*
 * xml.h - a small, strict-enough XML reader for metadata files (Open Ephys
 * settings.xml): the text becomes a tree of elements with their attributes
 * and text, held in three flat arrays.
 *
 * What it reads: an optional prolog (<?xml ...?>, comments, <!DOCTYPE ...>
 * with an internal subset skipped), exactly one root element, nested
 * elements with attributes quoted by ' or ", self-closing tags, character
 * data, CDATA sections, comments and processing instructions anywhere.
 * References &lt; &gt; &amp; &quot; &apos; &#N; &#xH; are decoded in
 * attribute values and text (as UTF-8). Names are runs of letters, digits,
 * '_', ':', '.', '-' and bytes >= 0x80. Bytes are not validated as UTF-8.
 *
 * What it refuses (BS_ERR_INPUT, "NAME: line L: expected ..., got ..."): a NUL
 * byte, unterminated tags/comments/strings, a closing tag that does not match
 * the open element, text or a second element outside the root, an unknown
 * entity, nesting deeper than BS_XML_MAX_DEPTH, input larger than
 * BS_XML_MAX_BYTES. Duplicate attributes are kept (the reader that uses them
 * decides). The parser is iterative (no recursion) and linear in the input
 * size; every string it returns is a NUL-terminated copy in one pool of at
 * most 2 x input bytes + 2, from the accountant (tag "io/xml").
 *
 * Element text (bs_xml_node.text) is the first run of character data or
 * CDATA directly inside the element that is not all blanks, with leading and
 * trailing blanks removed ("" if none); later runs are ignored.
 */
#ifndef BS_XML_H
#define BS_XML_H

#include <stddef.h>

#include "../common/status.h"

#define BS_XML_MAX_BYTES ((size_t)64 << 20) /* bytes */
#define BS_XML_MAX_DEPTH 256                /* nested elements */

typedef struct {
    const char *name;
    const char *value; /* references decoded */
} bs_xml_attr;

typedef struct {
    const char *name;
    const char *text;   /* see above */
    int parent;         /* node index, -1 for the root */
    int first_child;    /* -1 if none */
    int next_sibling;   /* -1 if none */
    int subtree_end;    /* one past the last descendant's index (descendants are contiguous) */
    int attr_first;     /* index into bs_xml_doc.attrs */
    int attr_count;
    int line;           /* 1-based line of the start tag */
} bs_xml_node;

typedef struct {
    char name[512];     /* file name for messages */
    char *pool;         /* strings */
    bs_xml_node *nodes; /* [n_nodes], document order; nodes[0] is the root */
    int n_nodes;
    bs_xml_attr *attrs; /* [n_attrs] */
    int n_attrs;
} bs_xml_doc;

/* Parse `len` bytes (need not be NUL-terminated). `name` is used in messages.
 * On failure *doc is left empty (safe to free). */
bs_status bs_xml_parse(const char *text, size_t len, const char *name, bs_xml_doc *doc);
bs_status bs_xml_read(const char *path, bs_xml_doc *doc);
void bs_xml_free(bs_xml_doc *doc);

/* First child of `node` named `name` (any name if NULL), or -1. */
int bs_xml_child(const bs_xml_doc *doc, int node, const char *name);
/* Next sibling after `node` named `name` (any if NULL), or -1. */
int bs_xml_next(const bs_xml_doc *doc, int node, const char *name);
/* Next element named `name` after `from` in document order that lies inside
 * `scope` (a descendant of it), or -1. Start with from = scope. */
int bs_xml_find(const bs_xml_doc *doc, int scope, int from, const char *name);
/* Value of the first attribute `name` of `node`, or NULL. */
const char *bs_xml_attr_get(const bs_xml_doc *doc, int node, const char *name);

#endif
