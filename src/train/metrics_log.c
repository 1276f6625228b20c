/* metrics.jsonl and training.svg: one record per evaluation, rewritten
 * whole after each, and read back on resume up to the checkpoint's step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer_internal.h"

#define METRICS_MAX_BYTES ((size_t)256 << 20)

static void format_number(char *buf, size_t n, double v)
{
    if (isfinite(v))
        snprintf(buf, n, "%.8g", v);
    else
        snprintf(buf, n, "null"); /* JSON has no NaN */
}

int trainer_write_metrics_and_curves(const trainer *t, ac_err *err)
{
    if (!t->writer)
        return 0;
    size_t cap = 640 * (size_t)(t->n_points + 1), len = 0; /* a line is at most ~450 bytes */
    char *text = malloc(cap);
    if (!text)
        return ac_err_set(err, "out of memory");
    for (int i = 0; i < t->n_points; i++) {
        const ac_metric_point *p = &t->points[i];
        char epoch[32], tl[32], vl[32], va[32], sa[32], sm[32], tp[32], ec[32], lr[32], tps[32],
            el[32];
        format_number(epoch, sizeof epoch, p->epoch);
        format_number(tl, sizeof tl, p->train_loss);
        format_number(vl, sizeof vl, p->val_loss);
        format_number(va, sizeof va, p->val_accuracy);
        format_number(sa, sizeof sa, p->span_accuracy);
        format_number(sm, sizeof sm, p->span_majority);
        format_number(tp, sizeof tp, p->temperature);
        format_number(ec, sizeof ec, p->val_ece);
        format_number(lr, sizeof lr, p->lr);
        format_number(tps, sizeof tps, p->tokens_per_s);
        format_number(el, sizeof el, p->elapsed_s);
        /* Runs of several members say whose evaluation a line is. */
        char who[112] = "";
        if (p->soup && p->kept_member > 0)
            snprintf(who, sizeof who,
                     ", \"soup\": true, \"kept_member\": %d, \"mean_val_accuracy\": %.9g",
                     p->kept_member, p->mean_val_accuracy);
        else if (p->soup)
            snprintf(who, sizeof who, ", \"soup\": true");
        else if (p->member > 0)
            snprintf(who, sizeof who, ", \"member\": %d", p->member);
        int w = snprintf(text + len, cap - len,
                         "{\"step\": %ld, \"epoch\": %s, \"train_loss\": %s, \"val_loss\": %s, "
                         "\"val_accuracy\": %s, \"short_span_accuracy\": %s, "
                         "\"short_span_majority\": %s, \"temperature\": %s, \"val_ece\": %s, "
                         "\"lr\": %s, \"tokens_per_s\": %s, \"elapsed_s\": %s%s}\n",
                         p->step, epoch, tl, vl, va, sa, sm, tp, ec, lr, tps, el, who);
        if (w < 0 || (size_t)w >= cap - len) {
            free(text);
            return ac_err_set(err, "internal error: metrics line too long");
        }
        len += (size_t)w;
    }
    int rc = ac_write_file_atomic(t->metrics_path, text, len, err);
    free(text);
    if (rc)
        return rc;
    char *svg = ac_curves_svg(t->points, t->n_points, t->obj->curves);
    if (!svg)
        return ac_err_set(err, "out of memory");
    rc = ac_write_file_atomic(t->svg_path, svg, strlen(svg), err);
    free(svg);
    return rc;
}

int trainer_push_point(trainer *t, const ac_metric_point *p, ac_err *err)
{
    if (t->n_points == t->cap_points) {
        int cap = t->cap_points ? 2 * t->cap_points : 64;
        ac_metric_point *grown = realloc(t->points, (size_t)cap * sizeof *grown);
        if (!grown)
            return ac_err_set(err, "out of memory");
        t->points = grown;
        t->cap_points = cap;
    }
    t->points[t->n_points++] = *p;
    return 0;
}

static double json_number(const cJSON *obj, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(item) ? item->valuedouble : NAN;
}

/* Reads the metrics of earlier sessions, keeping evaluations up to the
 * checkpoint's step: later lines (from after the checkpoint, e.g. a crash
 * between the metrics write and the checkpoint save) are dropped, since they
 * will be recomputed. */
int trainer_load_metrics_until(trainer *t, long max_step, ac_err *err)
{
    if (access(t->metrics_path, F_OK) != 0)
        return 0;
    char *data = NULL;
    size_t len = 0;
    if (ac_read_file(t->metrics_path, METRICS_MAX_BYTES, &data, &len, err))
        return -1;
    int rc = 0;
    long line_no = 0;
    for (char *line = data; line < data + len && rc == 0;) {
        char *end = memchr(line, '\n', (size_t)(data + len - line));
        size_t line_len = end ? (size_t)(end - line) : (size_t)(data + len - line);
        line_no++;
        size_t k = 0;
        while (k < line_len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r'))
            k++;
        if (k < line_len) {
            cJSON *obj = cJSON_ParseWithLength(line, line_len);
            double step = json_number(obj, "step");
            if (!cJSON_IsObject(obj) || !isfinite(step)) {
                rc = ac_err_set(err,
                                "%s:%ld: not a metrics record (fix or delete the file to resume)",
                                t->metrics_path, line_no);
            } else if ((long)step <= max_step) {
                ac_metric_point p = {
                    .step = (long)step,
                    .epoch = json_number(obj, "epoch"),
                    .train_loss = json_number(obj, "train_loss"),
                    .val_loss = json_number(obj, "val_loss"),
                    .val_accuracy = json_number(obj, "val_accuracy"),
                    .span_accuracy = json_number(obj, "short_span_accuracy"),
                    .span_majority = json_number(obj, "short_span_majority"),
                    .temperature = json_number(obj, "temperature"),
                    .val_ece = json_number(obj, "val_ece"),
                    .lr = json_number(obj, "lr"),
                    .tokens_per_s = json_number(obj, "tokens_per_s"),
                    .elapsed_s = json_number(obj, "elapsed_s"),
                };
                double member = json_number(obj, "member");
                p.member = isfinite(member) && member >= 1 && member <= AC_MAX_MEMBERS
                               ? (int)member
                               : 0;
                p.soup = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj, "soup"));
                double kept = json_number(obj, "kept_member");
                p.kept_member = p.soup && isfinite(kept) && kept >= 1 && kept <= AC_MAX_MEMBERS
                                    ? (int)kept
                                    : 0;
                p.mean_val_accuracy = p.kept_member ? json_number(obj, "mean_val_accuracy") : NAN;
                p.worst_member_accuracy = NAN;
                rc = trainer_push_point(t, &p, err);
            }
            cJSON_Delete(obj);
        }
        line = end ? end + 1 : data + len;
    }
    free(data);
    return rc;
}
