/* Terminal renderer of `attnctl inspect`: the label line and the review's
 * tokens shaded by what the pooled representation draws from them. Without
 * colour (NO_COLOR, or not a terminal) each token is followed by its weight,
 * e.g. `great(0.210)`, so that the output stays readable in a pipe. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "render.h"

/* Nearest entry of the xterm 6x6x6 colour cube. */
static int xterm_cube_index(const unsigned char rgb[3])
{
    int level[3];
    for (int c = 0; c < 3; c++)
        level[c] = rgb[c] < 48 ? 0 : rgb[c] < 115 ? 1 : (rgb[c] - 35) / 40;
    return 16 + 36 * level[0] + 6 * level[1] + level[2];
}

static void set_colours(ac_strbuf *out, const unsigned char bg[3], int underline,
                        render_colour_mode colour)
{
    unsigned char fg[3] = {0, 0, 0};
    if (!render_dark_text_on(bg))
        fg[0] = fg[1] = fg[2] = 255;
    if (colour == RENDER_COLOUR_TRUE)
        ac_strbuf_printf(out, "\x1b[48;2;%d;%d;%dm\x1b[38;2;%d;%d;%dm", bg[0], bg[1], bg[2], fg[0], fg[1],
                         fg[2]);
    else
        ac_strbuf_printf(out, "\x1b[48;5;%dm\x1b[38;5;%dm", xterm_cube_index(bg), fg[0] ? 231 : 16);
    if (underline)
        ac_strbuf_puts(out, "\x1b[4m");
}

/* The review's tokens wrapped at width, each shaded (colour) or followed by
 * its number (no colour): the attention weight as "(0.123)" when attr is 0,
 * the attribution to the predicted class as "[+0.123]" when attr is 1. */
static void text_tokens(ac_strbuf *out, const inspect_view *v, render_colour_mode colour, int width,
                        int attr, double scale)
{
    int column = 0;
    for (int i = 0; i < v->n; i++) {
        char number[32] = "";
        const char *open = "", *close = "";
        double value = attr ? inspect_attr(v, i) : v->token_weight[i];
        if (colour == RENDER_COLOUR_NONE) {
            if (attr)
                snprintf(number, sizeof number, "[%+.3f]", value);
            else
                snprintf(number, sizeof number, "(%.3f)", value);
            if (v->unknown[i]) {
                open = "<unk:";
                close = ">";
            }
        }
        int w = cli_display_width(v->tokens[i]) + (int)strlen(number) + (int)strlen(open) + (int)strlen(close);
        if (column > 0 && column + 1 + w > width) {
            ac_strbuf_puts(out, "\n");
            column = 0;
        } else if (column > 0) {
            ac_strbuf_puts(out, " ");
            column++;
        }
        double t = value / scale;
        int shaded = colour != RENDER_COLOUR_NONE && fabs(t) >= 0.05;
        if (shaded) {
            unsigned char bg[3];
            if (attr)
                render_diverging_colour(t, bg);
            else
                render_shade_colour(t, bg);
            set_colours(out, bg, v->unknown[i], colour);
        } else if (colour != RENDER_COLOUR_NONE && v->unknown[i]) {
            ac_strbuf_puts(out, "\x1b[4m");
        }
        ac_strbuf_puts(out, open);
        ac_strbuf_puts(out, v->tokens[i]);
        ac_strbuf_puts(out, close);
        ac_strbuf_puts(out, number);
        if (colour != RENDER_COLOUR_NONE && (shaded || v->unknown[i]))
            ac_strbuf_puts(out, "\x1b[0m");
        column += w;
    }
    ac_strbuf_puts(out, "\n");
}

void render_text(ac_strbuf *out, const inspect_view *v, render_colour_mode colour, int width)
{
    if (width <= 0)
        width = 80;
    if (v->n_classes == 0) {
        ac_strbuf_puts(out, "pretrained encoder (masked LM): no classifier, attention only\n");
    } else {
        ac_strbuf_puts(out, "label: ");
        ac_strbuf_puts(out, v->labels[v->predicted]);
        ac_strbuf_puts(out, " (");
        int listed[INSPECT_LISTED_CLASSES];
        double rest;
        int shown = inspect_listed_classes(v, listed, &rest);
        for (int k = 0; k < shown; k++)
            ac_strbuf_printf(out, "%s%s %.3f", k ? ", " : "", v->labels[listed[k]],
                             v->probs[listed[k]]);
        if (shown < v->n_classes)
            ac_strbuf_printf(out, "; %d more classes, %.3f in all", v->n_classes - shown, rest);
        ac_strbuf_puts(out, ")\n");
    }

    double wmax = 0.0;
    int any_unknown = 0;
    for (int i = 0; i < v->n; i++) {
        if (v->token_weight[i] > wmax)
            wmax = v->token_weight[i];
        any_unknown |= v->unknown[i];
    }
    if (wmax <= 0.0)
        wmax = 1.0;

    text_tokens(out, v, colour, width, 0, wmax);
    if (v->full_len > v->n)
        ac_strbuf_printf(out, "note: the model read %d of the %d tokens (truncated as configured)\n", v->n,
                         v->full_len);
    if (colour == RENDER_COLOUR_NONE) {
        ac_strbuf_printf(out, "weights: %s\n", v->weight_measure);
        if (any_unknown)
            ac_strbuf_puts(out, "<unk:word>: the word is not in the vocabulary\n");
    } else {
        ac_strbuf_printf(out, "shading: %s; pale = little, dark red = the most (%.3f)\n", v->weight_measure,
                         wmax);
        if (any_unknown)
            ac_strbuf_puts(out, "underlined: not in the vocabulary\n");
    }
    if (v->attribution == AC_ATTR_NONE)
        return;

    /* Which words pushed the prediction, and which way. */
    const char *label = v->labels[v->predicted];
    double amax = inspect_attr_max(v, v->n), sum = 0.0;
    for (int i = 0; i < v->n; i++)
        sum += inspect_attr(v, i);
    ac_strbuf_printf(out, "\nattribution to %s (%s", label, render_attr_name(v->attribution));
    if (v->attribution == AC_ATTR_IG)
        ac_strbuf_printf(out, ", %d steps", v->attr_steps);
    ac_strbuf_printf(out, "; completeness gap %.2g %%):\n", 100.0 * v->attr_delta);
    text_tokens(out, v, colour, width, 1, amax);
    if (colour == RENDER_COLOUR_NONE)
        ac_strbuf_printf(out, "[+x]: how far the token moved the logit of %s: + toward it, - against\n", label);
    else
        ac_strbuf_printf(out, "shading: red = pushed toward %s, blue = against; darkest = +-%.3f\n", label, amax);
    ac_strbuf_printf(out, "sum %+.4f = logit %.4f - baseline logit %.4f; baseline: %s\n", sum,
                     v->logits[v->predicted], v->baseline_logits[v->predicted], v->attr_baseline);
}
