/*
 * spikeglx.c - opening a SpikeGLX recording: path resolution and the binary.
 *
 * A path names the binary ("x.imec0.ap.bin"), its metadata ("x.imec0.ap.meta")
 * or a folder; a folder must hold exactly one "*.ap.bin" (else the message
 * lists what it found). The binary and the metadata share a stem: ".bin" <->
 * ".meta". The metadata gives the columns, rate, probe and gains
 * (spikeglx_geom.c); the binary's REAL size gives the sample count, which must
 * be a whole number of samples (nSavedChans int16 values each). A size that
 * disagrees with the metadata's fileSizeBytes is only a warning: files get
 * truncated by crashes or stubbed for sharing, and the bytes on disk are what
 * can be read. A zero-byte binary opens with n_samples = 0.
 */
#include "spikeglx.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/fileio.h"
#include "../common/log.h"
#include "../mem/mem.h"

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The one *.ap.bin inside a folder. */
static bs_status find_ap_bin(const char *dir, char *bin_path, size_t bin_len)
{
    DIR *d = opendir(dir);
    if (!d)
        return bs_error(BS_ERR_INPUT, "%s: cannot open the folder: %s", dir, strerror(errno));
    char *names[16];
    int n = 0, total = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!ends_with(de->d_name, ".ap.bin"))
            continue;
        if (n < 16)
            names[n++] = strdup(de->d_name);
        total++;
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        if (!names[i]) {
            for (int j = 0; j < n; j++)
                free(names[j]);
            return bs_error(BS_ERR_MEMORY, "%s: out of memory listing the folder", dir);
        }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    bs_status st = BS_OK;
    if (total == 0) {
        st = bs_error(BS_ERR_INPUT, "%s: the folder holds no *.ap.bin file, expected one SpikeGLX AP binary", dir);
    } else if (total > 1) {
        char list[2048] = "";
        for (int i = 0; i < n; i++) {
            size_t used = strlen(list);
            snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", names[i]);
        }
        st = bs_error(BS_ERR_INPUT, "%s: the folder holds %d *.ap.bin files (%s%s); name the one to open", dir, total,
                      list, total > n ? ", ..." : "");
    } else {
        st = bs_path_join(bin_path, bin_len, dir, names[0]);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    return st;
}

static bs_status swap_suffix(const char *path, const char *from, const char *to, char *out, size_t out_len)
{
    size_t stem = strlen(path) - strlen(from);
    if (stem + strlen(to) + 1 > out_len)
        return bs_error(BS_ERR_INPUT, "%s: path too long", path);
    memcpy(out, path, stem);
    strcpy(out + stem, to);
    return BS_OK;
}

bs_status bs_spikeglx_resolve(const char *path, char *bin_path, size_t bin_len, char *meta_path, size_t meta_len)
{
    struct stat sb;
    if (strlen(path) >= bin_len || strlen(path) >= meta_len)
        return bs_error(BS_ERR_INPUT, "%.200s...: path too long", path);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        BS_TRY(find_ap_bin(path, bin_path, bin_len));
        BS_TRY(swap_suffix(bin_path, ".bin", ".meta", meta_path, meta_len));
    } else if (ends_with(path, ".bin")) {
        snprintf(bin_path, bin_len, "%s", path);
        BS_TRY(swap_suffix(path, ".bin", ".meta", meta_path, meta_len));
    } else if (ends_with(path, ".meta")) {
        snprintf(meta_path, meta_len, "%s", path);
        BS_TRY(swap_suffix(path, ".meta", ".bin", bin_path, bin_len));
    } else {
        return bs_error(BS_ERR_INPUT, "%s: expected a SpikeGLX .bin, its .meta, or a folder holding one *.ap.bin",
                        path);
    }
    if (stat(meta_path, &sb) != 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot find the metadata file beside the binary (%s)", meta_path,
                        strerror(errno));
    if (stat(bin_path, &sb) != 0)
        return bs_error(BS_ERR_INPUT, "%s: cannot find the binary beside the metadata file (%s)", bin_path,
                        strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return bs_error(BS_ERR_INPUT, "%s: expected a regular file", bin_path);
    return BS_OK;
}

bs_status bs_spikeglx_open(const char *path, bs_recording *rec)
{
    memset(rec, 0, sizeof *rec);
    char bin[4096], meta_path[4096];
    BS_TRY(bs_spikeglx_resolve(path, bin, sizeof bin, meta_path, sizeof meta_path));
    bs_sglx_meta m;
    BS_TRY(bs_sglx_meta_read(meta_path, &m));
    bs_sglx_info info;
    bs_status st = bs_sglx_info_from_meta(&m, 0, &info);
    bs_sglx_meta_free(&m);
    if (st != BS_OK)
        return st;
    uint64_t bytes = 0;
    st = bs_file_size(bin, &bytes);
    uint64_t sample_bytes = (uint64_t)info.n_saved_chans * 2;
    if (st == BS_OK && bytes % sample_bytes != 0)
        st = bs_error(BS_ERR_INPUT,
                      "%s: the file is %llu bytes, not a multiple of nSavedChans * 2 = %llu bytes per sample "
                      "(truncated?)",
                      bin, (unsigned long long)bytes, (unsigned long long)sample_bytes);
    if (st != BS_OK) {
        bs_sglx_info_free(&info);
        return st;
    }
    if (info.meta_file_bytes >= 0 && (uint64_t)info.meta_file_bytes != bytes)
        bs_log_warn("%s: the file is %llu bytes but the metadata's fileSizeBytes says %lld; using the real size", bin,
                    (unsigned long long)bytes, (long long)info.meta_file_bytes);
    snprintf(rec->data_path, sizeof rec->data_path, "%s", bin);
    snprintf(rec->format, sizeof rec->format, "spikeglx");
    rec->dtype = BS_SAMPLE_I16;
    rec->n_cols = info.n_saved_chans;
    rec->data_offset = 0;
    rec->n_samples = (int64_t)(bytes / sample_bytes);
    rec->fs_hz = info.fs_hz;
    rec->uv_per_bit = info.uv_per_bit;
    rec->offset = 0;
    rec->first_sample = info.first_sample;
    rec->probe = info.probe;
    bs_mem_free(info.acq_chan);
    bs_log_debug("%s: %d sorted channels of %d columns, %lld samples at %.6f Hz, probe %s", bin, rec->probe.n_chan,
                 rec->n_cols, (long long)rec->n_samples, rec->fs_hz, rec->probe.model);
    return BS_OK;
}
