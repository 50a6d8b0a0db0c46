/*
 * nwb_general.c - the NWB file's descriptive metadata from export-nwb's options
 * (bs_nwb_general, nwb_export.h): what nwbinspector asks of a file (a subject is
 * CRITICAL; experimenter, institution, keywords, ... are suggestions).
 *
 * Layout (NWB 2.7 core): /general/subject is a Subject group (namespace
 * "core") holding one scalar text dataset per field given (subject_id,
 * species, sex, age with attribute reference = "birth", description,
 * genotype, strain, weight, date_of_birth); /general/experimenter and
 * /general/keywords are 1-D text datasets; /general/institution, /lab and
 * /experiment_description scalar text. The subject comes from a JSON object
 * whose keys must be those fields and whose values must be strings; sex must
 * be one of NWB's M, F, U, O and age an ISO 8601 duration ("P90D"). In a copy
 * of an input NWB file a field the input already has is refused (the input is
 * the record of the experiment), not replaced.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../common/fileio.h"
#include "nwb_export.h"

const char *const bs_nwb_subject_keys[] = {"subject_id", "species", "sex",    "age",          "description",
                                           "genotype",   "strain",  "weight", "date_of_birth", NULL};

/* The subject object of m->subject_json, checked (caller deletes); BS_OK with *out NULL when none. */
static bs_status subject_parse(const bs_nwb_general *m, cJSON **out)
{
    *out = NULL;
    if (!m || !m->subject_json)
        return BS_OK;
    char *text = NULL;
    size_t len = 0;
    BS_TRY(bs_read_text_file(m->subject_json, (size_t)1 << 20, &text, &len));
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return bs_error(BS_ERR_INPUT, "%s: --subject-json: expected a JSON object such as {\"subject_id\": \"M12\", "
                                      "\"species\": \"Mus musculus\", \"sex\": \"M\", \"age\": \"P90D\"}",
                        m->subject_json);
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, j)
    {
        int known = 0;
        for (int k = 0; bs_nwb_subject_keys[k]; k++)
            known |= strcmp(v->string, bs_nwb_subject_keys[k]) == 0;
        const char *bad = !known                   ? "is not a field of NWB's Subject (subject_id, species, sex, age, "
                                                     "description, genotype, strain, weight, date_of_birth)"
                          : !cJSON_IsString(v)     ? "must be a string"
                          : !v->valuestring[0]     ? "is empty"
                          : strcmp(v->string, "sex") == 0 &&
                                  (v->valuestring[1] != '\0' || !strchr("MFUO", v->valuestring[0]))
                              ? "must be one of M, F, U (unknown), O (other)"
                          : strcmp(v->string, "age") == 0 && v->valuestring[0] != 'P'
                              ? "must be an ISO 8601 duration such as P90D (90 days) or P1Y2M"
                              : NULL;
        if (bad) {
            bs_status st = bs_error(BS_ERR_INPUT, "%s: --subject-json: \"%s\" %s", m->subject_json, v->string, bad);
            cJSON_Delete(j);
            return st;
        }
    }
    *out = j;
    return BS_OK;
}

bs_status bs_nwb_general_check(const bs_nwb_general *m)
{
    cJSON *j;
    BS_TRY(subject_parse(m, &j));
    cJSON_Delete(j);
    for (int i = 0; m && i < m->n_experimenters; i++)
        if (!m->experimenters[i][0])
            return bs_error(BS_ERR_USAGE, "--experimenter: an empty name");
    return BS_OK;
}

#ifdef BS_HAVE_HDF5
#include "../io/nwb_h5.h"
#include "nwb_write.h"

static bs_status refuse_existing(hid_t file, const char *path)
{
    if (bs_h5_exists(file, path))
        return bs_error(BS_ERR_INPUT, "the input NWB file already has %s: it is kept as it is; leave out the option "
                                      "that sets it",
                        path);
    return BS_OK;
}

static bs_status text(hid_t file, const char *path, const char *value)
{
    if (!value)
        return BS_OK;
    BS_TRY(refuse_existing(file, path));
    return bs_h5_str_dataset(file, path, value);
}

bs_status bs_nwb_write_general(hid_t file, const bs_nwb_general *m, uint64_t seed)
{
    if (!m)
        return BS_OK;
    cJSON *subj;
    BS_TRY(subject_parse(m, &subj));
    bs_status st = BS_OK;
    if (!bs_h5_exists(file, "/general")) {
        hid_t g = bs_h5_group(file, "/general");
        st = g >= 0 ? BS_OK : BS_ERR_INPUT;
        if (g >= 0)
            H5Gclose(g);
    }
    if (st == BS_OK && subj) {
        st = refuse_existing(file, "/general/subject");
        hid_t g = st == BS_OK ? bs_h5_group(file, "/general/subject") : -1;
        if (st == BS_OK && g < 0)
            st = BS_ERR_INPUT;
        if (st == BS_OK)
            st = bs_nwb_mark(g, "core", "Subject", seed);
        for (int k = 0; st == BS_OK && bs_nwb_subject_keys[k]; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(subj, bs_nwb_subject_keys[k]);
            if (!v)
                continue;
            st = bs_h5_str_dataset(g, bs_nwb_subject_keys[k], v->valuestring);
            if (st == BS_OK && strcmp(bs_nwb_subject_keys[k], "age") == 0) {
                hid_t d = H5Dopen2(g, "age", H5P_DEFAULT);
                st = d >= 0 ? bs_h5_attr_str(d, "reference", "birth") : BS_ERR_INPUT;
                if (d >= 0)
                    H5Dclose(d);
            }
        }
        if (g >= 0)
            H5Gclose(g);
    }
    cJSON_Delete(subj);
    if (st == BS_OK && m->n_experimenters > 0) {
        st = refuse_existing(file, "/general/experimenter");
        if (st == BS_OK)
            st = bs_h5_strs_dataset(file, "/general/experimenter", m->experimenters, m->n_experimenters);
    }
    if (st == BS_OK && m->keywords) {
        st = refuse_existing(file, "/general/keywords");
        char *copy = strdup(m->keywords), *save = NULL;
        const char *words[64];
        int n = 0;
        for (char *w = copy ? strtok_r(copy, ",", &save) : NULL; w && n < 64; w = strtok_r(NULL, ",", &save)) {
            while (*w == ' ')
                w++;
            if (*w)
                words[n++] = w;
        }
        if (!copy)
            st = BS_ERR_MEMORY;
        else if (st == BS_OK && n > 0)
            st = bs_h5_strs_dataset(file, "/general/keywords", words, n);
        free(copy);
    }
    if (st == BS_OK)
        st = text(file, "/general/institution", m->institution);
    if (st == BS_OK)
        st = text(file, "/general/lab", m->lab);
    if (st == BS_OK)
        st = text(file, "/general/experiment_description", m->experiment_description);
    return st;
}
#endif
