/*
 * json_msg.c - syntax error or nesting limit: the message of a JSON file cJSON refused.
 */
#include "json_msg.h"

#include <cjson/cJSON.h>

bs_status bs_json_parse_error(const char *text, size_t len, const char *name, const char *expected)
{
    const char *at = cJSON_GetErrorPtr();
    long off = (at && at >= text && at <= text + len) ? (long)(at - text) : -1;
    /* the nesting depth where parsing stopped: brackets outside strings */
    long depth = 0;
    int in_str = 0;
    for (long i = 0; i < off; i++) {
        char ch = text[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == '[' || ch == '{') {
            depth++;
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    if (depth >= CJSON_NESTING_LIMIT)
        return bs_error(BS_ERR_INPUT, "%s: JSON nested deeper than the limit of %d levels near byte %ld: expected %s",
                        name, CJSON_NESTING_LIMIT, off, expected);
    return bs_error(BS_ERR_INPUT, "%s: not valid JSON (syntax error near byte %ld): expected %s", name, off, expected);
}
