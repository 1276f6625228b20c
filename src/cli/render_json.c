/* The output buffer and escaping shared by the inspect renderers, and the
 * JSON renderer. The JSON attention array is nested [layer][head][query][key]
 * over the real tokens, the layout bertviz's head_view/model_view take. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/model.h"
#include "render.h"

/* ------------------------------------------------------------ output buffer */

void rb_init(render_buf *b)
{
    memset(b, 0, sizeof *b);
}

void rb_free(render_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static int rb_reserve(render_buf *b, size_t extra)
{
    if (b->failed)
        return -1;
    if (b->len + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1) {
        if (cap > ((size_t)-1) / 2) {
            b->failed = 1;
            return -1;
        }
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void rb_put(render_buf *b, const char *s, size_t n)
{
    if (rb_reserve(b, n) != 0)
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void rb_puts(render_buf *b, const char *s)
{
    rb_put(b, s, strlen(s));
}

void rb_printf(render_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        rb_put(b, small, (size_t)n);
        return;
    }
    if (rb_reserve(b, (size_t)n) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void rb_number(render_buf *b, double x)
{
    rb_number_digits(b, x, 6);
}

void rb_number_digits(render_buf *b, double x, int digits)
{
    if (!isfinite(x)) {
        rb_puts(b, "null");
        return;
    }
    char s[40];
    snprintf(s, sizeof s, "%.*g", digits, x);
    /* A locale with a decimal comma must not break the JSON. */
    for (char *p = s; *p; p++)
        if (*p == ',')
            *p = '.';
    rb_puts(b, s);
}

void rb_json_string(render_buf *b, const char *s, int html_safe)
{
    rb_put(b, "\"", 1);
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
            rb_put(b, run, (size_t)(p - run));
            rb_puts(b, esc);
            run = p + 1;
        }
    }
    rb_puts(b, run);
    rb_put(b, "\"", 1);
}

void rb_xml_text(render_buf *b, const char *s)
{
    const char *run = s;
    for (const char *p = s; *p; p++) {
        const char *esc = NULL;
        switch (*p) {
        case '&': esc = "&amp;"; break;
        case '<': esc = "&lt;"; break;
        case '>': esc = "&gt;"; break;
        case '"': esc = "&quot;"; break;
        case '\'': esc = "&#39;"; break;
        default: break;
        }
        if (esc) {
            rb_put(b, run, (size_t)(p - run));
            rb_puts(b, esc);
            run = p + 1;
        }
    }
    rb_puts(b, run);
}

int render_utf8_length(const char *s)
{
    int n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}

void rb_xml_text_cut(render_buf *b, const char *s, int max_chars)
{
    if (render_utf8_length(s) <= max_chars) {
        rb_xml_text(b, s);
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
    rb_xml_text(b, cut);
    rb_puts(b, "\xE2\x80\xA6");
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
static void json_by_class(render_buf *out, const inspect_view *v, const double *x)
{
    rb_puts(out, "{");
    for (int c = 0; c < v->n_classes; c++) {
        rb_puts(out, c ? ", " : "");
        rb_json_string(out, v->labels[c], 0);
        rb_puts(out, ": ");
        rb_number(out, x[c]);
    }
    rb_puts(out, "}");
}

void render_json(render_buf *out, const inspect_view *v)
{
    int n = v->n;
    rb_puts(out, "{\n  \"tokens\": [");
    for (int i = 0; i < n; i++) {
        if (i)
            rb_puts(out, ", ");
        rb_json_string(out, v->tokens[i], 0);
    }
    rb_puts(out, "],\n  \"ids\": [");
    for (int i = 0; i < n; i++)
        rb_printf(out, "%s%d", i ? ", " : "", (int)v->ids[i]);
    rb_puts(out, "],\n  \"unknown\": [");
    for (int i = 0; i < n; i++)
        rb_printf(out, "%s%s", i ? ", " : "", v->unknown[i] ? "true" : "false");
    rb_puts(out, "],\n  \"label\": ");
    if (v->n_classes == 0) /* a pretrained encoder: no prediction */
        rb_puts(out, "null");
    else
        rb_json_string(out, v->labels[v->predicted], 0);
    rb_puts(out, ",\n  \"probabilities\": {");
    for (int c = 0; c < v->n_classes; c++) {
        rb_puts(out, c ? ", " : "");
        rb_json_string(out, v->labels[c], 0);
        rb_puts(out, ": ");
        rb_number(out, v->probs[c]);
    }
    rb_puts(out, "},\n  \"logits\": ");
    json_by_class(out, v, v->logits);
    rb_puts(out, ",\n  \"attribution\": ");
    rb_json_string(out, ac_attr_method_name(v->attribution), 0);
    if (v->attribution != AC_ATTR_NONE) {
        if (v->attribution == AC_ATTR_IG)
            rb_printf(out, ",\n  \"attribution_steps\": %d", v->attr_steps);
        rb_puts(out, ",\n  \"attribution_baseline\": ");
        rb_json_string(out, v->attr_baseline, 0);
        rb_puts(out, ",\n  \"baseline_logits\": ");
        json_by_class(out, v, v->baseline_logits);
        rb_puts(out, ",\n  \"attributions\": {");
        for (int c = 0; c < v->n_classes; c++) {
            rb_puts(out, c ? ",\n    " : "\n    ");
            rb_json_string(out, v->labels[c], 0);
            rb_puts(out, ": [");
            for (int i = 0; i < n; i++) {
                rb_puts(out, i ? ", " : "");
                rb_number(out, v->attr_scores[(size_t)c * n + i]);
            }
            rb_puts(out, "]");
        }
        rb_puts(out, "\n  },\n  \"delta\": ");
        rb_number(out, v->attr_delta);
    }
    rb_printf(out, ",\n  \"length\": %d,\n  \"full_length\": %d,\n  \"truncated\": %s,\n", n,
              v->full_len, v->full_len > n ? "true" : "false");
    rb_puts(out, "  \"pooling\": ");
    rb_json_string(out, ac_pooling_name(v->pooling), 0);
    rb_puts(out, ",\n  \"token_weights\": [");
    for (int i = 0; i < n; i++) {
        rb_puts(out, i ? ", " : "");
        rb_number(out, v->token_weight[i]);
    }
    rb_puts(out, "],\n  \"token_weight_measure\": ");
    rb_json_string(out, v->weight_measure, 0);
    rb_puts(out, ",\n  \"layers\": [");
    for (int l = 0; l < v->layer_count; l++)
        rb_printf(out, "%s%d", l ? ", " : "", v->layer_first + l);
    rb_puts(out, "],\n  \"heads\": [");
    for (int h = 0; h < v->head_count; h++)
        rb_printf(out, "%s%d", h ? ", " : "", v->head_first + h);
    rb_puts(out, "],\n  \"attention\": [");
    for (int l = 0; l < v->layer_count; l++) {
        rb_puts(out, l ? ",\n    [" : "\n    [");
        for (int h = 0; h < v->head_count; h++) {
            rb_puts(out, h ? ",\n      [" : "\n      [");
            const float *a = inspect_map(v, v->layer_first + l, v->head_first + h);
            for (int q = 0; q < n; q++) {
                rb_puts(out, q ? ",\n        [" : "\n        [");
                for (int k = 0; k < n; k++) {
                    rb_puts(out, k ? ", " : "");
                    rb_number(out, a[(size_t)q * n + k]);
                }
                rb_puts(out, "]");
            }
            rb_puts(out, "\n      ]");
        }
        rb_puts(out, "\n    ]");
    }
    rb_puts(out, "\n  ]\n}\n");
}
