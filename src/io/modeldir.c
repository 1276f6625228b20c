/* The model directory: config.json + vocab.txt + model.safetensors (and for
 * --resume optimizer.safetensors + trainer_state.json). Loads check the files
 * against each other; saves write every temporary file first and only then
 * rename them all, so a failure while writing never changes an existing file. */
#include "attnctl/io.h"
#include "attnctl/quant_io.h"

#include <dirent.h>
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONFIG_FILE "config.json"
#define VOCAB_FILE "vocab.txt"
#define MODEL_FILE "model.safetensors"
#define OPTIM_FILE "optimizer.safetensors"
#define STATE_FILE "trainer_state.json"

/* dir + "/" + name, malloc'd (NULL when out of memory). */
static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t total = n + 1 + strlen(name) + 1;
    char *p = malloc(total);
    if (p)
        snprintf(p, total, "%.*s/%s", (int)n, dir, name);
    return p;
}

static void shape_text(char *out, size_t n, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(out, n, "[");
    for (int k = 0; k < ndim && used < n; k++)
        used += (size_t)snprintf(out + used, n - used, "%s%lld", k ? ", " : "", (long long)shape[k]);
    if (used < n)
        snprintf(out + used, n - used, "]");
}

/* Every tensor of the model at data offset 4 x its flat offset, and the data
 * itself 4-byte aligned: the data section is the flat buffer. */
static int in_table_order(const ac_safetensors *st, const ac_model *m)
{
    if ((uintptr_t)st->data % sizeof(float) != 0 ||
        st->data_len != m->n_params * sizeof(float))
        return 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_st_tensor *t = ac_st_find(st, m->table[i].name);
        if (!t || t->begin != m->table[i].offset * sizeof(float))
            return 0;
    }
    return 1;
}

static int copy_tensors(const ac_safetensors *st, const ac_model *m, const char *prefix, float *dst,
                        const char *path, ac_err *err);

/* Presence, dtype and shape of every parameter tensor prefix+<name>. */
static int check_tensors(const ac_safetensors *st, const ac_model *m, const char *prefix,
                         const char *path, ac_err *err)
{
    return copy_tensors(st, m, prefix, NULL, path, err);
}

/* Copies tensor prefix+<param name> of st into dst (model layout) for every
 * parameter, after checking presence, dtype and shape (dst NULL: checks only). */
static int copy_tensors(const ac_safetensors *st, const ac_model *m, const char *prefix, float *dst,
                        const char *path, ac_err *err)
{
    char name[AC_PARAM_NAME_LEN + 8];
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_param_info *p = &m->table[i];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        const ac_st_tensor *t = ac_st_find(st, name);
        if (!t)
            return ac_err_set(err, "%s: tensor \"%s\" is missing", path, name);
        if (strcmp(t->dtype, "F32") != 0)
            return ac_err_set(err, "%s: tensor \"%s\": dtype %s, expected F32", path, name, t->dtype);
        int64_t want[2] = {p->shape[0], p->shape[1]};
        int same = t->ndim == p->ndim;
        for (int k = 0; same && k < p->ndim; k++)
            same = t->shape[k] == want[k];
        if (!same) {
            char got_s[96], want_s[64];
            shape_text(got_s, sizeof got_s, t->ndim, t->shape);
            shape_text(want_s, sizeof want_s, p->ndim, want);
            return ac_err_set(err, "%s: tensor \"%s\": shape %s, expected %s (from config.json)",
                              path, name, got_s, want_s);
        }
        const float *src = ac_st_f32(st, t);
        if (!src)
            return ac_err_set(err, "%s: tensor \"%s\": data not 4-byte aligned", path, name);
        if (dst)
            memcpy(dst + p->offset, src, p->numel * sizeof(float));
    }
    return 0;
}

/* Every tensor of st must be one of prefixes[k] + a parameter name. (The
 * parser rejects duplicates, so with copy_tensors this pins the exact set.) */
static int check_no_extras(const ac_safetensors *st, const ac_model *m, const char *const *prefixes,
                           int n_prefixes, const char *path, ac_err *err)
{
    for (int i = 0; i < st->n; i++) {
        const char *tn = st->tensors[i].name;
        int ok = 0;
        for (int k = 0; !ok && k < n_prefixes; k++) {
            size_t plen = strlen(prefixes[k]);
            ok = strncmp(tn, prefixes[k], plen) == 0 && ac_model_find_tensor(m, tn + plen) >= 0;
        }
        if (!ok)
            return ac_err_set(err, "%s: unexpected tensor \"%.100s\" (not part of a model with this config.json)",
                              path, tn);
    }
    return 0;
}

void ac_model_dir_free(ac_model_dir *md)
{
    if (!md)
        return;
    ac_config_free(&md->config);
    if (md->vocab.tokens || md->vocab.slots)
        ac_vocab_free(&md->vocab);
    ac_model_free(&md->model);
    memset(md, 0, sizeof *md);
}

/* config.json, and how the model is stored (a quantized model's "storage"
 * object, see attnctl/quant_io.h; zeroed for the plain F32 layout). */
static int load_config_storage(ac_config *c, ac_storage *storage, const char *dir, ac_err *err)
{
    if (!dir[0]) /* "" + "/config.json" would read the root directory's */
        return ac_err_set(err, "the model directory's path is empty");
    char *path = path_join(dir, CONFIG_FILE), *text = NULL, *rest = NULL;
    size_t len = 0;
    if (!path)
        return ac_err_set(err, "%s: out of memory", dir);
    ac_config_defaults(c);
    int rc = ac_read_file(path, (size_t)16 << 20, &text, &len, err);
    if (rc == 0)
        rc = ac_storage_split(storage, &rest, text, len, path, err);
    if (rc == 0)
        rc = ac_config_parse(c, rest ? rest : text, rest ? strlen(rest) : len, path, 1, err);
    free(rest);
    free(text);
    free(path);
    if (rc != 0)
        ac_config_free(c);
    return rc;
}

int ac_model_dir_load_config(ac_config *c, const char *dir, ac_err *err)
{
    ac_storage storage = {0};
    return load_config_storage(c, &storage, dir, err);
}

/* The tensors of model.safetensors into m (created from the config). */
static int load_tensors(ac_model *m, const ac_model_config *mc, const char *dir,
                        const char *model_path, ac_err *err)
{
    if (ac_model_create(m, mc, err) != 0) {
        ac_err_prefix(err, "%s/" CONFIG_FILE, dir);
        return -1;
    }
    ac_safetensors st;
    static const char *const NO_PREFIX[] = {""};
    if (ac_st_map(&st, model_path, err) != 0 ||
        check_tensors(&st, m, "", model_path, err) != 0 ||
        check_no_extras(&st, m, NO_PREFIX, 1, model_path, err) != 0) {
        ac_st_free(&st);
        return -1;
    }
    if (st.mapping && in_table_order(&st, m)) {
        /* The file's data is the flat parameter buffer: use it in place. */
        ac_model_adopt_params(m, (float *)(void *)st.data, st.mapping, st.mapping_len);
        st.mapping = NULL;
        st.data = NULL;
    } else {
        copy_tensors(&st, m, "", m->params, model_path, err);
    }
    ac_st_free(&st);
    return 0;
}

static int model_dir_load(ac_model_dir *md, const char *dir, int lazy, ac_err *err);

int ac_model_dir_load(ac_model_dir *md, const char *dir, ac_err *err)
{
    return model_dir_load(md, dir, 0, err);
}

int ac_model_dir_load_inference(ac_model_dir *md, const char *dir, ac_err *err)
{
    return model_dir_load(md, dir, 1, err);
}

/* model.safetensors into m: the F32 layout, or the quantized one that storage describes. */
static int load_model_tensors(ac_model *m, const ac_model_config *mc, const ac_storage *storage,
                              const char *dir, const char *model_path, int lazy, ac_err *err)
{
    if (!storage->quantized)
        return load_tensors(m, mc, dir, model_path, err);
    if (ac_model_create(m, mc, err) != 0) {
        ac_err_prefix(err, "%s/" CONFIG_FILE, dir);
        return -1;
    }
    return ac_quant_load_tensors(m, storage, model_path, lazy, err);
}

/* config.json and then the tensors, loaded on a thread of their own while
 * vocab.txt loads. */
typedef struct {
    ac_model_dir *md;
    ac_storage *storage;
    const char *dir, *model_path;
    int lazy, config_rc, tensor_rc;
    ac_err config_err, tensor_err;
} model_job;

static void *run_model_job(void *arg)
{
    model_job *j = arg;
    j->config_rc = load_config_storage(&j->md->config, j->storage, j->dir, &j->config_err);
    if (j->config_rc == 0)
        j->tensor_rc = load_model_tensors(&j->md->model, &j->md->config.model, j->storage, j->dir,
                                          j->model_path, j->lazy, &j->tensor_err);
    return NULL;
}

static int model_dir_load(ac_model_dir *md, const char *dir, int lazy, ac_err *err)
{
    memset(md, 0, sizeof *md);
    ac_storage storage = {0};
    char *vocab_path = path_join(dir, VOCAB_FILE), *model_path = path_join(dir, MODEL_FILE);
    int rc = -1;
    if (!vocab_path || !model_path) {
        ac_err_set(err, "%s: out of memory", dir);
        goto done;
    }
    /* A cold `predict`: config.json and the tensors (for a quantized model
     * checked and unpacked) take about as long as vocab.txt (30,000 lines
     * hashed), so they load on a second thread meanwhile. The thread is a
     * plain one, not OpenMP's: a team's idle thread would spin through the
     * rest of the run. A full load (lazy 0) unpacks with threads of its own:
     * it loads on this thread. Errors are reported in file order:
     * config.json, vocab.txt, model.safetensors. */
    model_job job = {.md = md, .storage = &storage, .dir = dir, .model_path = model_path,
                     .lazy = lazy};
    pthread_t model_thread;
    const int threaded = lazy && omp_get_max_threads() > 1 &&
                         pthread_create(&model_thread, NULL, run_model_job, &job) == 0;
    if (!threaded)
        run_model_job(&job);
    ac_err vocab_err;
    /* (the thread's config_rc is only read after the join) */
    int vocab_rc = threaded || job.config_rc == 0 ? ac_vocab_load(&md->vocab, vocab_path, &vocab_err)
                                                  : 0;
    if (threaded)
        pthread_join(model_thread, NULL);
    if (job.config_rc != 0) {
        *err = job.config_err;
        goto done;
    }
    if (vocab_rc != 0) {
        *err = vocab_err;
        goto done;
    }
    const ac_model_config *mc = &md->config.model;
    if (md->vocab.size != mc->vocab_size) {
        ac_err_set(err, "%s: %d tokens, but config.json says model.vocab_size %d", vocab_path,
                   (int)md->vocab.size, mc->vocab_size);
        goto done;
    }
    if (mc->pooling == AC_POOL_CLS && !md->vocab.with_cls) {
        ac_err_set(err, "%s: no <cls> token (line 3), but config.json says model.pooling \"cls\"",
                   vocab_path);
        goto done;
    }
    if (job.tensor_rc != 0) {
        *err = job.tensor_err;
        goto done;
    }
    rc = 0;
done:
    free(vocab_path);
    free(model_path);
    if (rc != 0)
        ac_model_dir_free(md);
    return rc;
}

/* The step a checkpoint file records: trainer_state.json's, or the
 * "step" of a safetensors file's __metadata__. 1 (in *step), 0 when it
 * records none (written before attnctl recorded it), -1 when unreadable. */
static int recorded_step(const char *path, int is_state, long *step)
{
    ac_err ignored;
    if (is_state) {
        ac_trainer_state st;
        memset(&st, 0, sizeof st);
        if (ac_trainer_state_load(&st, path, &ignored) != 0)
            return -1;
        *step = st.step;
        return 1;
    }
    ac_safetensors st;
    if (ac_st_map(&st, path, &ignored) != 0)
        return -1;
    int found = 0;
    for (int i = 0; i < st.n_meta && !found; i++) {
        if (strcmp(st.meta_keys[i], "step") != 0)
            continue;
        char *end;
        errno = 0;
        long v = strtol(st.meta_values[i], &end, 10);
        found = errno == 0 && end != st.meta_values[i] && *end == '\0' && v >= 0 ? 1 : -1;
        *step = v;
    }
    ac_st_free(&st);
    return found;
}

/* A temp file in dir of `name`, left by a writer that is gone, holding
 * `step`: its path (malloc'd), or NULL. */
static char *stale_temp_of_step(const char *dir, const char *name, int is_state, long step)
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char *found = NULL;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        if (!ac_is_stale_temp_of(e->d_name, name))
            continue;
        char *path = path_join(dir, e->d_name);
        long s;
        if (path && recorded_step(path, is_state, &s) == 1 && s == step)
            found = path;
        else
            free(path);
    }
    closedir(d);
    return found;
}

int ac_checkpoint_recover(const char *dir, int *completed, ac_err *err)
{
    /* The order ac_model_dir_save renames them in (config and vocab before). */
    static const char *const NAMES[] = {STATE_FILE, OPTIM_FILE, MODEL_FILE};
    enum { N = 3 };
    long step[N];
    *completed = 0;
    for (int i = 0; i < N; i++) {
        char *path = path_join(dir, NAMES[i]);
        if (!path)
            return ac_err_set(err, "%s: out of memory", dir);
        int r = recorded_step(path, i == 0, &step[i]);
        free(path);
        /* A missing or unreadable file is the loader's to report; a file
         * written before steps were recorded cannot be checked. */
        if (r != 1)
            return 0;
    }
    long newest = step[0];
    for (int i = 1; i < N; i++)
        newest = step[i] > newest ? step[i] : newest;
    if (step[0] == newest && step[1] == newest && step[2] == newest)
        return 0;
    /* A save cut short between its renames: every file was complete (written
     * and synced) before the first rename, so the files not yet renamed are
     * still there as the dead writer's temp files. Finish the save. */
    char *temps[N] = {NULL, NULL, NULL};
    int rc = 0;
    for (int i = 0; i < N && rc == 0; i++) {
        if (step[i] == newest)
            continue;
        temps[i] = stale_temp_of_step(dir, NAMES[i], i == 0, newest);
        if (!temps[i])
            rc = ac_err_set(err, "%s: a save was cut short (trainer_state.json of step %ld, "
                                 "optimizer.safetensors of step %ld, model.safetensors of step "
                                 "%ld) and the rest of step %ld's files is gone; the checkpoint "
                                 "cannot be resumed",
                            dir, step[0], step[1], step[2], newest);
    }
    for (int i = 0; i < N && rc == 0; i++) {
        if (!temps[i])
            continue;
        char *path = path_join(dir, NAMES[i]);
        if (!path || rename(temps[i], path) != 0)
            rc = ac_err_set(err, "%s: cannot finish the save cut short at step %ld: %s", dir,
                            newest, path ? strerror(errno) : "out of memory");
        else
            (*completed)++;
        free(path);
    }
    for (int i = 0; i < N; i++)
        free(temps[i]);
    if (rc == 0 && ac_fsync_dir(dir, err) != 0)
        rc = -1;
    return rc;
}

int ac_model_dir_load_resume(const char *dir, const ac_model *m, float *m1, float *m2,
                             ac_trainer_state *state, ac_err *err)
{
    char *optim_path = path_join(dir, OPTIM_FILE), *state_path = path_join(dir, STATE_FILE);
    ac_safetensors st;
    memset(&st, 0, sizeof st);
    int rc = -1;
    if (!optim_path || !state_path) {
        ac_err_set(err, "%s: out of memory", dir);
        goto done;
    }
    static const char *const MOMENT_PREFIXES[] = {"m1.", "m2."};
    if (ac_st_load(&st, optim_path, err) != 0 ||
        copy_tensors(&st, m, "m1.", m1, optim_path, err) != 0 ||
        copy_tensors(&st, m, "m2.", m2, optim_path, err) != 0 ||
        check_no_extras(&st, m, MOMENT_PREFIXES, 2, optim_path, err) != 0)
        goto done;
    if (ac_trainer_state_load(state, state_path, err) != 0)
        goto done;
    rc = 0;
done:
    ac_st_free(&st);
    free(optim_path);
    free(state_path);
    return rc;
}

/* ------------------------------------------------------------------- saving */

/* Safetensors entries for the model's parameters in table order, names
 * prefixed (e.g. "m1."); names are malloc'd into names[]. */
static int make_entries(const ac_model *m, const float *base, const char *prefix, ac_st_entry *e,
                        char **names)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_param_info *p = &m->table[i];
        size_t n = strlen(prefix) + strlen(p->name) + 1;
        names[i] = malloc(n);
        if (!names[i])
            return -1;
        snprintf(names[i], n, "%s%s", prefix, p->name);
        memset(&e[i], 0, sizeof e[i]);
        e[i].name = names[i];
        e[i].ndim = p->ndim;
        for (int k = 0; k < p->ndim; k++)
            e[i].shape[k] = p->shape[k];
        e[i].data = base + p->offset;
    }
    return 0;
}

static int same_model_config(const ac_model_config *a, const ac_model_config *b)
{
    return a->vocab_size == b->vocab_size && a->max_len == b->max_len && a->d_model == b->d_model &&
           a->n_heads == b->n_heads && a->d_ff == b->d_ff && a->n_layers == b->n_layers &&
           a->n_classes == b->n_classes && a->pooling == b->pooling && a->dropout == b->dropout &&
           a->ln_eps == b->ln_eps && a->objective == b->objective;
}

/* vocab.txt as text in memory (ac_vocab_write takes a FILE *). */
static char *vocab_text(const ac_vocab *v, size_t *len, const char *path, ac_err *err)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) {
        ac_err_set(err, "%s: out of memory", path);
        return NULL;
    }
    int rc = ac_vocab_write(v, f, err);
    if (fclose(f) != 0 && rc == 0)
        rc = ac_err_set(err, "%s: out of memory", path);
    if (rc != 0) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

enum { F_CONFIG, F_VOCAB, F_STATE, F_OPTIM, F_MODEL, N_FILES };
static const char *const FILE_NAMES[N_FILES] = {CONFIG_FILE, VOCAB_FILE, STATE_FILE, OPTIM_FILE,
                                                MODEL_FILE};

static int model_dir_save(const char *dir, const ac_config *cfg, const ac_vocab *v,
                          const ac_model *m, const float *m1, const float *m2,
                          const ac_trainer_state *state, int sync_last, ac_err *err);

int ac_model_dir_save(const char *dir, const ac_config *cfg, const ac_vocab *v, const ac_model *m,
                      const float *m1, const float *m2, const ac_trainer_state *state,
                      ac_err *err)
{
    return model_dir_save(dir, cfg, v, m, m1, m2, state, 0, err);
}

int ac_model_dir_save_sync_last(const char *dir, const ac_config *cfg, const ac_vocab *v,
                                const ac_model *m, const float *m1, const float *m2,
                                const ac_trainer_state *state, ac_err *err)
{
    return model_dir_save(dir, cfg, v, m, m1, m2, state, 1, err);
}

static int model_dir_save(const char *dir, const ac_config *cfg, const ac_vocab *v,
                          const ac_model *m, const float *m1, const float *m2,
                          const ac_trainer_state *state, int sync_last, ac_err *err)
{
    int with_resume = m1 || m2 || state;
    if (with_resume && !(m1 && m2 && state))
        return ac_err_set(err, "%s: resume state needs both moments and the trainer state", dir);
    if (!same_model_config(&cfg->model, &m->cfg))
        return ac_err_set(err, "%s: config model section differs from the model being saved", dir);
    if (v->size != cfg->model.vocab_size)
        return ac_err_set(err, "%s: vocabulary has %d tokens but model.vocab_size is %d", dir,
                          (int)v->size, cfg->model.vocab_size);
    if (cfg->n_labels != cfg->model.n_classes)
        return ac_err_set(err, "%s: %d labels but model.n_classes is %d", dir, cfg->n_labels,
                          cfg->model.n_classes);
    if (ac_mkdir_p(dir, err) != 0)
        return -1;

    ac_atomic_file files[N_FILES];
    int begun[N_FILES] = {0};
    char *paths[N_FILES] = {0};
    char *config_json = NULL, *vocab_buf = NULL, *state_json = NULL;
    size_t vocab_len = 0;
    ac_st_entry *entries = calloc((size_t)m->n_tensors * 2 + 1, sizeof *entries);
    char **names = calloc((size_t)m->n_tensors * 2 + 1, sizeof *names);
    int rc = -1, published = 0;
    if (!entries || !names) {
        ac_err_set(err, "%s: out of memory", dir);
        goto done;
    }
    for (int i = 0; i < N_FILES; i++)
        if (!(paths[i] = path_join(dir, FILE_NAMES[i]))) {
            ac_err_set(err, "%s: out of memory", dir);
            goto done;
        }

    /* 1. Every temporary file written and synced; nothing visible changes yet. */
    config_json = ac_config_to_json(cfg);
    if (!config_json) {
        ac_err_set(err, "%s: out of memory", paths[F_CONFIG]);
        goto done;
    }
    vocab_buf = vocab_text(v, &vocab_len, paths[F_VOCAB], err);
    if (!vocab_buf)
        goto done;
    if (with_resume && !(state_json = ac_trainer_state_to_json(state))) {
        ac_err_set(err, "%s: out of memory", paths[F_STATE]);
        goto done;
    }
    /* A checkpoint's weights and moments record their step, as
     * trainer_state.json does: a resume can tell a save cut short between
     * its renames (ac_checkpoint_recover). */
    char step_text[32];
    snprintf(step_text, sizeof step_text, "%ld", with_resume ? state->step : 0L);
    const char *const META[] = {"format", "pt", "producer", ("attnctl " AC_VERSION), "step",
                                step_text};
    const int n_meta = with_resume ? 3 : 2;
    for (int i = 0; i < N_FILES; i++) {
        if ((i == F_STATE || i == F_OPTIM) && !with_resume)
            continue;
        if (ac_atomic_begin(&files[i], paths[i], err) != 0)
            goto done;
        begun[i] = 1;
        int wrc;
        switch (i) {
        case F_CONFIG:
            wrc = ac_atomic_write(&files[i], config_json, strlen(config_json), err);
            break;
        case F_VOCAB:
            wrc = ac_atomic_write(&files[i], vocab_buf, vocab_len, err);
            break;
        case F_STATE:
            wrc = ac_atomic_write(&files[i], state_json, strlen(state_json), err);
            break;
        case F_OPTIM:
            wrc = make_entries(m, m1, "m1.", entries, names) != 0 ||
                          make_entries(m, m2, "m2.", entries + m->n_tensors, names + m->n_tensors) != 0
                      ? ac_err_set(err, "%s: out of memory", paths[i])
                      : ac_st_write(&files[i], entries, 2 * m->n_tensors, META, n_meta, err);
            break;
        default: /* F_MODEL */
            for (int k = 0; k < 2 * m->n_tensors; k++) {
                free(names[k]);
                names[k] = NULL;
            }
            wrc = make_entries(m, m->params, "", entries, names) != 0
                      ? ac_err_set(err, "%s: out of memory", paths[i])
                      : ac_st_write(&files[i], entries, m->n_tensors, META, n_meta, err);
            break;
        }
        if (wrc != 0 || (!sync_last && ac_atomic_finish(&files[i], err) != 0))
            goto done;
    }

    /* 2. Rename them all into place (model.safetensors last), then sync the directory. */
    for (int i = 0; i < N_FILES; i++) {
        if (!begun[i])
            continue;
        if (ac_atomic_publish(&files[i], err) != 0) {
            if (published)
                ac_err_prefix(err, "%s: save incomplete (%d of the files already replaced)", dir,
                              published);
            goto done;
        }
        published++;
    }
    /* sync_last: synced once in place (ac_model_dir_save_sync_last). */
    for (int i = 0; sync_last && i < N_FILES; i++)
        if (begun[i] && ac_atomic_finish(&files[i], err) != 0)
            goto done;
    /* Without resume state, resume files of an earlier save would no longer match the weights. */
    if (!with_resume)
        for (int i = F_STATE; i <= F_OPTIM; i++)
            if (unlink(paths[i]) != 0 && errno != ENOENT) {
                ac_err_set(err, "%s: cannot remove the stale file: %s", paths[i], strerror(errno));
                goto done;
            }
    if (ac_fsync_dir(dir, err) != 0)
        goto done;
    rc = 0;
done:
    for (int i = 0; i < N_FILES; i++) {
        if (begun[i]) /* removes a temp file not yet published */
            ac_atomic_abort(&files[i]);
        free(paths[i]);
    }
    if (names)
        for (int k = 0; k < 2 * m->n_tensors; k++)
            free(names[k]);
    free(names);
    free(entries);
    free(config_json);
    free(vocab_buf);
    free(state_json);
    return rc;
}
