/* The number and string writers shared by the inspect renderers, and the
 * JSON renderer. The JSON attention array is nested [layer][head][query][key]
 * over the real tokens, the layout bertviz's head_view/model_view take. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/model.h"
#include "render.h"

/* ------------------------------- writers into an ac_strbuf (attnctl/strbuf.h) */

void rb_number(ac_strbuf *b, double x)
{
    rb_number_digits(b, x, 6);
}

void rb_number_digits(ac_strbuf *b, double x, int digits)
{
    if (!isfinite(x)) {
        ac_strbuf_puts(b, "null");
        return;
    }
    char s[40];
    snprintf(s, sizeof s, "%.*g", digits, x);
    /* A locale with a decimal comma must not break the JSON. */
    for (char *p = s; *p; p++)
        if (*p == ',')
            *p = '.';
    ac_strbuf_puts(b, s);
}

void rb_json_string(ac_strbuf *b, const char *s, int html_safe)
{
    ac_strbuf_put(b, "\"", 1);
    const char *run = s; /* bytes copied as they are */
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        const char *esc = NULL;
        char hex[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20 || (html_safe && (c == '<' || c == '>' || c == '&'))) {
                snprintf(hex, sizeof hex, "\\u%04x", c);
                esc = hex;
            }
        }
        if (esc) {
            ac_strbuf_put(b, run, (size_t)(p - run));
            ac_strbuf_puts(b, esc);
            run = p + 1;
        }
    }
    ac_strbuf_puts(b, run);
    ac_strbuf_put(b, "\"", 1);
}

int render_utf8_length(const char *s)
{
    int n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}

void rb_xml_text_cut(ac_strbuf *b, const char *s, int max_chars)
{
    if (render_utf8_length(s) <= max_chars) {
        ac_strbuf_xml_text(b, s);
        return;
    }
    /* Keep max_chars - 1 code points and add an ellipsis. */
    const char *p = s;
    int kept = 0;
    while (*p) {
        if (((unsigned char)*p & 0xC0) != 0x80) {
            if (kept == max_chars - 1)
                break;
            kept++;
        }
        p++;
    }
    size_t n = (size_t)(p - s);
    char *cut = malloc(n + 1);
    if (!cut) {
        b->failed = 1;
        return;
    }
    memcpy(cut, s, n);
    cut[n] = '\0';
    ac_strbuf_xml_text(b, cut);
    ac_strbuf_puts(b, "\xE2\x80\xA6");
    free(cut);
}

/* ----------------------------------------------------------------- shared */

double inspect_vmax(const inspect_view *v, int m)
{
    double vmax = 0.0;
    for (int l = v->layer_first; l < v->layer_first + v->layer_count; l++)
        for (int h = v->head_first; h < v->head_first + v->head_count; h++) {
            const float *a = inspect_map(v, l, h);
            for (int q = 0; q < m; q++)
                for (int k = 0; k < m; k++)
                    if (a[(size_t)q * v->n + k] > vmax)
                        vmax = a[(size_t)q * v->n + k];
        }
    return vmax > 0.0 ? vmax : 1.0;
}

const char *render_attr_name(ac_attr_method m)
{
    return m == AC_ATTR_IG ? "integrated gradients" : m == AC_ATTR_GRADXINPUT ? "gradient x input" : "none";
}

int inspect_listed_classes(const inspect_view *v, int listed[INSPECT_LISTED_CLASSES],
                           double *rest_prob)
{
    *rest_prob = 0.0;
    if (v->n_classes <= INSPECT_LISTED_CLASSES) {
        for (int c = 0; c < v->n_classes; c++)
            listed[c] = c;
        return v->n_classes;
    }
    /* Selection by repeated scans: at most 6 passes over at most 1,000 classes. */
    double total = 0.0;
    for (int c = 0; c < v->n_classes; c++)
        total += v->probs[c];
    double kept = 0.0;
    for (int k = 0; k < INSPECT_LISTED_CLASSES; k++) {
        int best = -1;
        for (int c = 0; c < v->n_classes; c++) {
            int taken = 0;
            for (int j = 0; j < k; j++)
                taken |= listed[j] == c;
            if (!taken && (best < 0 || v->probs[c] > v->probs[best]))
                best = c;
        }
        listed[k] = best;
        kept += v->probs[best];
    }
    *rest_prob = total - kept > 0.0 ? total - kept : 0.0;
    return INSPECT_LISTED_CLASSES;
}

double inspect_attr_max(const inspect_view *v, int m)
{
    double amax = 0.0;
    for (int i = 0; i < m; i++)
        if (fabs(inspect_attr(v, i)) > amax)
            amax = fabs(inspect_attr(v, i));
    return amax > 0.0 ? amax : 1.0;
}

/* ------------------------------------------------------------------- JSON */

/* {"label": value, ...} */
static void json_by_class(ac_strbuf *out, const inspect_view *v, const double *x)
{
    ac_strbuf_puts(out, "{");
    for (int c = 0; c < v->n_classes; c++) {
        ac_strbuf_puts(out, c ? ", " : "");
        rb_json_string(out, v->labels[c], 0);
        ac_strbuf_puts(out, ": ");
        rb_number(out, x[c]);
    }
    ac_strbuf_puts(out, "}");
}

void render_json(ac_strbuf *out, const inspect_view *v)
{
    int n = v->n;
    ac_strbuf_puts(out, "{\n  \"tokens\": [");
    for (int i = 0; i < n; i++) {
        if (i)
            ac_strbuf_puts(out, ", ");
        rb_json_string(out, v->tokens[i], 0);
    }
    ac_strbuf_puts(out, "],\n  \"ids\": [");
    for (int i = 0; i < n; i++)
        ac_strbuf_printf(out, "%s%d", i ? ", " : "", (int)v->ids[i]);
    ac_strbuf_puts(out, "],\n  \"unknown\": [");
    for (int i = 0; i < n; i++)
        ac_strbuf_printf(out, "%s%s", i ? ", " : "", v->unknown[i] ? "true" : "false");
    ac_strbuf_puts(out, "],\n  \"label\": ");
    if (v->n_classes == 0) /* a pretrained encoder: no prediction */
        ac_strbuf_puts(out, "null");
    else
        rb_json_string(out, v->labels[v->predicted], 0);
    ac_strbuf_puts(out, ",\n  \"probabilities\": {");
    for (int c = 0; c < v->n_classes; c++) {
        ac_strbuf_puts(out, c ? ", " : "");
        rb_json_string(out, v->labels[c], 0);
        ac_strbuf_puts(out, ": ");
        rb_number(out, v->probs[c]);
    }
    ac_strbuf_puts(out, "},\n  \"logits\": ");
    json_by_class(out, v, v->logits);
    ac_strbuf_puts(out, ",\n  \"attribution\": ");
    rb_json_string(out, ac_attr_method_name(v->attribution), 0);
    if (v->attribution != AC_ATTR_NONE) {
        if (v->attribution == AC_ATTR_IG)
            ac_strbuf_printf(out, ",\n  \"attribution_steps\": %d", v->attr_steps);
        ac_strbuf_puts(out, ",\n  \"attribution_baseline\": ");
        rb_json_string(out, v->attr_baseline, 0);
        ac_strbuf_puts(out, ",\n  \"baseline_logits\": ");
        json_by_class(out, v, v->baseline_logits);
        ac_strbuf_puts(out, ",\n  \"attributions\": {");
        for (int c = 0; c < v->n_classes; c++) {
            ac_strbuf_puts(out, c ? ",\n    " : "\n    ");
            rb_json_string(out, v->labels[c], 0);
            ac_strbuf_puts(out, ": [");
            for (int i = 0; i < n; i++) {
                ac_strbuf_puts(out, i ? ", " : "");
                rb_number(out, v->attr_scores[(size_t)c * n + i]);
            }
            ac_strbuf_puts(out, "]");
        }
        ac_strbuf_puts(out, "\n  },\n  \"delta\": ");
        rb_number(out, v->attr_delta);
    }
    ac_strbuf_printf(out, ",\n  \"length\": %d,\n  \"full_length\": %d,\n  \"truncated\": %s,\n", n,
                     v->full_len, v->full_len > n ? "true" : "false");
    ac_strbuf_puts(out, "  \"pooling\": ");
    rb_json_string(out, ac_pooling_name(v->pooling), 0);
    ac_strbuf_puts(out, ",\n  \"token_weights\": [");
    for (int i = 0; i < n; i++) {
        ac_strbuf_puts(out, i ? ", " : "");
        rb_number(out, v->token_weight[i]);
    }
    ac_strbuf_puts(out, "],\n  \"token_weight_measure\": ");
    rb_json_string(out, v->weight_measure, 0);
    ac_strbuf_puts(out, ",\n  \"layers\": [");
    for (int l = 0; l < v->layer_count; l++)
        ac_strbuf_printf(out, "%s%d", l ? ", " : "", v->layer_first + l);
    ac_strbuf_puts(out, "],\n  \"heads\": [");
    for (int h = 0; h < v->head_count; h++)
        ac_strbuf_printf(out, "%s%d", h ? ", " : "", v->head_first + h);
    ac_strbuf_puts(out, "],\n  \"attention\": [");
    for (int l = 0; l < v->layer_count; l++) {
        ac_strbuf_puts(out, l ? ",\n    [" : "\n    [");
        for (int h = 0; h < v->head_count; h++) {
            ac_strbuf_puts(out, h ? ",\n      [" : "\n      [");
            const float *a = inspect_map(v, v->layer_first + l, v->head_first + h);
            for (int q = 0; q < n; q++) {
                ac_strbuf_puts(out, q ? ",\n        [" : "\n        [");
                for (int k = 0; k < n; k++) {
                    ac_strbuf_puts(out, k ? ", " : "");
                    rb_number(out, a[(size_t)q * n + k]);
                }
                ac_strbuf_puts(out, "]");
            }
            ac_strbuf_puts(out, "\n      ]");
        }
        ac_strbuf_puts(out, "\n    ]");
    }
    ac_strbuf_puts(out, "\n  ]\n}\n");
}
