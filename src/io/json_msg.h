/*
 * json_msg.h - the message for a JSON input file that cJSON could not parse.
 *
 * cJSON refuses arrays and objects nested deeper than CJSON_NESTING_LIMIT the
 * same way as a syntax error; the readers of JSON inputs (probe files,
 * structure.oebin) say which of the two it was, and where.
 */
#ifndef BS_JSON_MSG_H
#define BS_JSON_MSG_H

#include <stddef.h>

#include "../common/status.h"

/* After cJSON_ParseWithLength(text, len) returned NULL: BS_ERR_INPUT with
 * "NAME: not valid JSON (syntax error near byte N): expected EXPECTED", or
 * "NAME: JSON nested deeper than the limit of L levels near byte N: expected
 * EXPECTED". */
bs_status bs_json_parse_error(const char *text, size_t len, const char *name, const char *expected);

#endif
