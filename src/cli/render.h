/* Renderers of `attnctl inspect`: one review's attention maps as JSON, SVG,
 * a self-contained HTML page or shaded terminal text. They write into a
 * growable memory buffer so that --out can replace a file atomically, and
 * they never print or exit. */
#ifndef ATTNCTL_CLI_RENDER_H
#define ATTNCTL_CLI_RENDER_H

#include <stddef.h>
#include <stdint.h>

#include "attnctl/attribution.h"
#include "attnctl/nn.h"
#include "attnctl/strbuf.h"

/* Heatmaps draw at most this many tokens (the first ones) so that a long
 * review still gives a file a browser opens quickly and a reader can read.
 * JSON always carries every token. */
#define INSPECT_SVG_MAX_TOKENS 64
#define INSPECT_HTML_MAX_TOKENS 128

/* ------------------------------- writers into an ac_strbuf (attnctl/strbuf.h) */

/* A JSON number with %.6g (always '.' as decimal point); null when not finite. */
void rb_number(ac_strbuf *b, double x);
/* The same with `digits` significant digits (for labels people read). */
void rb_number_digits(ac_strbuf *b, double x, int digits);
/* A quoted JSON string. html_safe also escapes < > & so that the JSON can sit
 * inside an HTML <script> element. s must be valid UTF-8. */
void rb_json_string(ac_strbuf *b, const char *s, int html_safe);
/* At most max_chars code points of s, "…" appended when cut (for labels). */
void rb_xml_text_cut(ac_strbuf *b, const char *s, int max_chars);

/* Number of code points of a valid UTF-8 string. */
int render_utf8_length(const char *s);

/* ----------------------------------------------------------------- colours */

/* Sequential heatmap scale (white -> dark blue), t in [0, 1]. */
void render_heat_colour(double t, unsigned char rgb[3]);
/* Highlighter scale for token shading (pale yellow -> dark red), t in [0, 1]. */
void render_shade_colour(double t, unsigned char rgb[3]);
/* Diverging scale for signed attributions (ColorBrewer RdBu): t in [-1, 1],
 * -1 dark blue (against), 0 near white, 1 dark red (toward). */
void render_diverging_colour(double t, unsigned char rgb[3]);
/* 1 when black text is more legible than white on rgb. */
int render_dark_text_on(const unsigned char rgb[3]);

/* ------------------------------------------------------------------- data */

typedef struct {
    int n;                          /* real tokens, [CLS] included */
    char *const *tokens;            /* display strings (valid UTF-8, no control
                                       characters); "[CLS]" for <cls>, the
                                       original word for <unk> */
    const int32_t *ids;             /* [n] */
    const unsigned char *unknown;   /* [n] 1 when ids[i] is <unk> */
    int full_len;                   /* tokens before truncation ([CLS] included) */
    int n_layers, n_heads;          /* of the model */
    int layer_first, layer_count;   /* selected layers [first, first + count) */
    int head_first, head_count;     /* selected heads */
    const float *attention;         /* [n_layers][n_heads][n][n] over real tokens */
    int n_classes;                  /* 0: a pretrained encoder (masked LM) without a
                                       classifier: no prediction, labels and probs NULL */
    char *const *labels;            /* [n_classes] */
    const float *probs;             /* [n_classes] */
    int predicted;
    ac_pooling pooling;
    const float *token_weight;      /* [n] what the pooled representation draws
                                       from each token; sums to 1 */
    const char *weight_measure;     /* one sentence saying what token_weight is */
    const double *logits;           /* [n_classes] raw (before the temperature) */
    /* Attributions (attribution != AC_ATTR_NONE; see attnctl/attribution.h). */
    ac_attr_method attribution;
    const double *attr_scores;      /* [n_classes][n]: class c's logit, token t */
    const double *baseline_logits;  /* [n_classes] */
    int attr_steps;                 /* IG intervals used */
    double attr_delta;              /* relative completeness gap of the predicted class */
    const char *attr_baseline;      /* one sentence saying what the baseline is */
} inspect_view;

/* What the baseline of the attributions is, in words. */
#define INSPECT_BASELINE                                                                   \
    "every token replaced by <pad> (its embedding row plus the same position; no n-gram " \
    "rows)"
#define INSPECT_BASELINE_CLS                                                                \
    "every word replaced by <pad> (its embedding row plus the same position; no n-gram "   \
    "rows), [CLS] kept as it is"

/* "integrated gradients" or "gradient x input". */
const char *render_attr_name(ac_attr_method m);
/* Attribution of token i to the predicted class. */
static inline double inspect_attr(const inspect_view *v, int i)
{
    return v->attr_scores[(size_t)v->predicted * (size_t)v->n + (size_t)i];
}
/* Largest |attribution| to the predicted class over the first m tokens (1 if all are 0). */
double inspect_attr_max(const inspect_view *v, int m);

static inline const float *inspect_map(const inspect_view *v, int layer, int head)
{
    return v->attention + ((size_t)layer * (size_t)v->n_heads + (size_t)head) * (size_t)v->n * (size_t)v->n;
}

/* Largest attention value among the selected maps over the first m tokens. */
double inspect_vmax(const inspect_view *v, int m);

/* The classes the text, SVG and HTML views list: every class in its order
 * up to INSPECT_LISTED_CLASSES, else the INSPECT_LISTED_CLASSES most
 * probable, most probable first (ties by index). Writes their indices to
 * listed and returns how many; *rest_prob gets the probability of the
 * classes left out (0 when none). The JSON always holds every class. */
#define INSPECT_LISTED_CLASSES 6
int inspect_listed_classes(const inspect_view *v, int listed[INSPECT_LISTED_CLASSES],
                           double *rest_prob);

void render_json(ac_strbuf *out, const inspect_view *v);
void render_svg(ac_strbuf *out, const inspect_view *v);
void render_html(ac_strbuf *out, const inspect_view *v);

typedef enum {
    RENDER_COLOUR_NONE = 0,   /* tokens followed by (weight) */
    RENDER_COLOUR_256 = 1,    /* xterm 256-colour backgrounds */
    RENDER_COLOUR_TRUE = 2,   /* 24-bit backgrounds */
} render_colour_mode;
/* width: columns to wrap at (<= 0: 80). */
void render_text(ac_strbuf *out, const inspect_view *v, render_colour_mode colour, int width);

#endif
