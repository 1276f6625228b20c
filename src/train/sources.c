/* checkpoint/run.json: where a run's data was and how it was read (files,
 * columns, objective, self-training), so that `--resume DIR` needs nothing
 * but DIR. Written by the trainer, read back by the command line before it
 * reads the data, hence apart from the loop. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer_internal.h"

#define RUN_FILE_MAX_BYTES ((size_t)1 << 20)

int trainer_write_sources(const trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    if (!t->writer)
        return 0;
    cJSON *root = cJSON_CreateObject();
    char *abs_train = o->train_path ? realpath(o->train_path, NULL) : NULL;
    char *abs_val = o->val_path ? realpath(o->val_path, NULL) : NULL;
    char *abs_unlabelled = NULL;
    int rc = -1;
    if (!root)
        goto oom;
    /* Absolute paths, so `--resume DIR` works from any working directory. */
    if (!cJSON_AddStringToObject(root, "train_file",
                                 abs_train ? abs_train : o->train_path ? o->train_path : "") ||
        !cJSON_AddStringToObject(root, "val_file",
                                 abs_val ? abs_val : o->val_path ? o->val_path : "") ||
        !cJSON_AddStringToObject(root, "text_column", o->text_column ? o->text_column : "") ||
        !cJSON_AddStringToObject(root, "label_column", o->label_column ? o->label_column : "") ||
        !cJSON_AddStringToObject(root, "objective", ac_objective_name(t->cfg.model.objective)))
        goto oom;
    if (t->obj->sources_to_json && t->obj->sources_to_json(t, root, err) != 0)
        goto done;
    if (o->teachers && o->teachers[0]) {
        abs_unlabelled = o->unlabelled_path ? realpath(o->unlabelled_path, NULL) : NULL;
        cJSON *self = cJSON_AddObjectToObject(root, "self_training");
        if (!self ||
            !cJSON_AddStringToObject(self, "unlabelled_file",
                                     abs_unlabelled ? abs_unlabelled
                                     : o->unlabelled_path ? o->unlabelled_path : "") ||
            !cJSON_AddStringToObject(self, "teachers", o->teachers) ||
            !cJSON_AddNumberToObject(self, "threshold", o->pseudo_threshold) ||
            !cJSON_AddNumberToObject(self, "rows", (double)o->n_pseudo) ||
            !cJSON_AddStringToObject(self, "sha256", o->pseudo_sha256 ? o->pseudo_sha256 : ""))
            goto oom;
    }
    char *text = cJSON_Print(root);
    if (!text)
        goto oom;
    char *path = ac_path_join(t->ckpt_dir, AC_RUN_FILE, err);
    if (path) {
        size_t len = strlen(text);
        text[len] = '\n'; /* replaces the NUL; written with its length */
        rc = ac_write_file_atomic(path, text, len + 1, err);
        free(path);
    }
    free(text);
    goto done;
oom:
    ac_err_set(err, "out of memory");
done:
    cJSON_Delete(root);
    free(abs_train);
    free(abs_val);
    free(abs_unlabelled);
    return rc;
}

static int json_string_field(const cJSON *root, const char *key, char *dst, size_t cap,
                             const char *path, ac_err *err)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsString(item))
        return ac_err_set(err, "%s: %s: must be a string", path, key);
    char what[256];
    snprintf(what, sizeof what, "%s: %s", path, key);
    return ac_copy_string(dst, cap, item->valuestring, what, err);
}

/* run.json's "self_training" object, when the run had teachers. */
static int self_training_from_json(const cJSON *root, ac_train_sources *s, const char *path,
                                   ac_err *err)
{
    const cJSON *self = cJSON_GetObjectItemCaseSensitive(root, "self_training");
    if (!self)
        return 0;
    if (!cJSON_IsObject(self))
        return ac_err_set(err, "%s: self_training: must be an object", path);
    if (json_string_field(self, "unlabelled_file", s->unlabelled_file,
                          sizeof s->unlabelled_file, path, err) ||
        json_string_field(self, "teachers", s->teachers, sizeof s->teachers, path, err) ||
        json_string_field(self, "sha256", s->pseudo_sha256, sizeof s->pseudo_sha256, path, err))
        return -1;
    const cJSON *threshold = cJSON_GetObjectItemCaseSensitive(self, "threshold");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(self, "rows");
    if (!cJSON_IsNumber(threshold) || !(threshold->valuedouble >= 0.0) ||
        threshold->valuedouble > 1.0)
        return ac_err_set(err, "%s: self_training.threshold: must be a number from 0 to 1", path);
    if (!cJSON_IsNumber(rows) || !(rows->valuedouble >= 0.0) || rows->valuedouble > 1e15 ||
        rows->valuedouble != floor(rows->valuedouble))
        return ac_err_set(err, "%s: self_training.rows: must be a whole number >= 0", path);
    if (!s->teachers[0])
        return ac_err_set(err, "%s: self_training.teachers: must not be empty", path);
    s->pseudo_threshold = threshold->valuedouble;
    s->n_pseudo = (int64_t)rows->valuedouble;
    return 0;
}

static int text_file_entry(const cJSON *file, int i, ac_train_sources *s, const char *path,
                           ac_err *err)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(file, "path");
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(file, "sha256");
    if (!cJSON_IsString(p) || !p->valuestring[0] || !cJSON_IsString(sha))
        return ac_err_set(err, "%s: text_files[%d]: must be {\"path\": ..., \"sha256\": ...}",
                          path, i);
    s->text_files[i] = strdup(p->valuestring);
    s->text_sha256[i] = strdup(sha->valuestring);
    if (!s->text_files[i] || !s->text_sha256[i])
        return ac_err_set(err, "out of memory");
    return 0;
}

/* run.json's text files of a masked-LM run, with their SHA-256 and format. */
static int text_files_from_json(const cJSON *root, ac_train_sources *s, const char *path,
                                ac_err *err)
{
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "text_format");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "text_files");
    if (!cJSON_IsString(format) || ac_text_format_parse(format->valuestring, &s->text_format))
        return ac_err_set(err, "%s: text_format: must be \"auto\", \"csv\" or \"lines\"", path);
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) < 1)
        return ac_err_set(err, "%s: text_files: must be a list of the text files", path);
    int n = cJSON_GetArraySize(files);
    s->text_files = calloc((size_t)n, sizeof *s->text_files);
    s->text_sha256 = calloc((size_t)n, sizeof *s->text_sha256);
    if (!s->text_files || !s->text_sha256)
        return ac_err_set(err, "out of memory");
    s->n_text_files = n;
    int i = 0;
    for (const cJSON *file = files->child; file; file = file->next, i++)
        if (text_file_entry(file, i, s, path, err))
            return -1;
    return 0;
}

int ac_train_sources_load(const char *out_dir, ac_train_sources *s, ac_err *err)
{
    memset(s, 0, sizeof *s);
    size_t n = strlen(out_dir) + strlen(AC_CHECKPOINT_SUBDIR) + strlen(AC_RUN_FILE) + 3;
    char *path = malloc(n);
    if (!path)
        return ac_err_set(err, "out of memory");
    snprintf(path, n, "%s/%s/%s", out_dir, AC_CHECKPOINT_SUBDIR, AC_RUN_FILE);
    if (access(path, F_OK) != 0) {
        ac_err_set(err, "%s holds no resumable checkpoint (%s not found)", out_dir, path);
        free(path);
        return -1;
    }
    char *data = NULL;
    size_t len = 0;
    int rc = ac_read_file(path, RUN_FILE_MAX_BYTES, &data, &len, err);
    if (rc == 0) {
        cJSON *root = cJSON_ParseWithLength(data, len);
        if (!cJSON_IsObject(root))
            rc = ac_err_set(err, "%s: not a JSON object", path);
        else if (json_string_field(root, "train_file", s->train_file, sizeof s->train_file, path,
                                   err) ||
                 json_string_field(root, "val_file", s->val_file, sizeof s->val_file, path, err) ||
                 json_string_field(root, "text_column", s->text_column, sizeof s->text_column,
                                   path, err) ||
                 json_string_field(root, "label_column", s->label_column,
                                   sizeof s->label_column, path, err))
            rc = -1;
        const cJSON *objective = cJSON_GetObjectItemCaseSensitive(root, "objective");
        if (rc == 0 && objective &&
            (!cJSON_IsString(objective) ||
             ac_objective_parse(objective->valuestring, &s->objective) != 0))
            rc = ac_err_set(err, "%s: objective: must be \"classification\" or \"masked_lm\"",
                            path);
        if (rc == 0 && s->objective == AC_OBJECTIVE_MASKED_LM)
            rc = text_files_from_json(root, s, path, err);
        if (rc == 0)
            rc = self_training_from_json(root, s, path, err);
        cJSON_Delete(root);
    }
    free(data);
    free(path);
    if (rc != 0)
        ac_train_sources_free(s);
    return rc;
}

void ac_train_sources_free(ac_train_sources *s)
{
    for (int i = 0; i < s->n_text_files; i++) {
        free(s->text_files[i]);
        free(s->text_sha256[i]);
    }
    free(s->text_files);
    free(s->text_sha256);
    s->text_files = s->text_sha256 = NULL;
    s->n_text_files = 0;
}
