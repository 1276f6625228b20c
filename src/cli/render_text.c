/* Terminal renderer of `attnctl inspect`: the label line and the review's
 * tokens shaded by what the pooled representation draws from them. Without
 * colour (NO_COLOR, or not a terminal) each token is followed by its weight,
 * e.g. `great(0.210)`, so that the output stays readable in a pipe. */
#include <stdio.h>
#include <string.h>

#include <utf8proc.h>

#include "render.h"

/* Columns a valid UTF-8 string takes on a terminal (wide characters count 2). */
static int display_width(const char *s)
{
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    int width = 0;
    while (*p) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate(p, -1, &cp);
        if (n <= 0) { /* cannot happen for sanitised tokens; count the byte */
            width++;
            p++;
            continue;
        }
        width += utf8proc_charwidth(cp);
        p += n;
    }
    return width;
}

/* Nearest entry of the xterm 6x6x6 colour cube. */
static int xterm_cube_index(const unsigned char rgb[3])
{
    int level[3];
    for (int c = 0; c < 3; c++)
        level[c] = rgb[c] < 48 ? 0 : rgb[c] < 115 ? 1 : (rgb[c] - 35) / 40;
    return 16 + 36 * level[0] + 6 * level[1] + level[2];
}

static void set_colours(render_buf *out, const unsigned char bg[3], int underline,
                        render_colour_mode colour)
{
    unsigned char fg[3] = {0, 0, 0};
    if (!render_dark_text_on(bg))
        fg[0] = fg[1] = fg[2] = 255;
    if (colour == RENDER_COLOUR_TRUE)
        rb_printf(out, "\x1b[48;2;%d;%d;%dm\x1b[38;2;%d;%d;%dm", bg[0], bg[1], bg[2], fg[0], fg[1],
                  fg[2]);
    else
        rb_printf(out, "\x1b[48;5;%dm\x1b[38;5;%dm", xterm_cube_index(bg), fg[0] ? 231 : 16);
    if (underline)
        rb_puts(out, "\x1b[4m");
}

void render_text(render_buf *out, const inspect_view *v, render_colour_mode colour, int width)
{
    if (width <= 0)
        width = 80;
    if (v->n_classes == 0) {
        rb_puts(out, "pretrained encoder (masked LM): no classifier, attention only\n");
    } else {
        rb_puts(out, "label: ");
        rb_puts(out, v->labels[v->predicted]);
        rb_puts(out, " (");
        for (int c = 0; c < v->n_classes; c++)
            rb_printf(out, "%s%s %.3f", c ? ", " : "", v->labels[c], v->probs[c]);
        rb_puts(out, ")\n");
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

    int column = 0;
    for (int i = 0; i < v->n; i++) {
        char weight[32] = "";
        const char *open = "", *close = "";
        if (colour == RENDER_COLOUR_NONE) {
            snprintf(weight, sizeof weight, "(%.3f)", v->token_weight[i]);
            if (v->unknown[i]) {
                open = "<unk:";
                close = ">";
            }
        }
        int w = display_width(v->tokens[i]) + (int)strlen(weight) + (int)strlen(open) + (int)strlen(close);
        if (column > 0 && column + 1 + w > width) {
            rb_puts(out, "\n");
            column = 0;
        } else if (column > 0) {
            rb_puts(out, " ");
            column++;
        }
        double t = v->token_weight[i] / wmax;
        int shaded = colour != RENDER_COLOUR_NONE && t >= 0.05;
        if (shaded) {
            unsigned char bg[3];
            render_shade_colour(t, bg);
            set_colours(out, bg, v->unknown[i], colour);
        } else if (colour != RENDER_COLOUR_NONE && v->unknown[i]) {
            rb_puts(out, "\x1b[4m");
        }
        rb_puts(out, open);
        rb_puts(out, v->tokens[i]);
        rb_puts(out, close);
        rb_puts(out, weight);
        if (colour != RENDER_COLOUR_NONE && (shaded || v->unknown[i]))
            rb_puts(out, "\x1b[0m");
        column += w;
    }
    rb_puts(out, "\n");
    if (v->full_len > v->n)
        rb_printf(out, "note: the model read %d of the %d tokens (truncated as configured)\n", v->n,
                  v->full_len);
    if (colour == RENDER_COLOUR_NONE) {
        rb_printf(out, "weights: %s\n", v->weight_measure);
        if (any_unknown)
            rb_puts(out, "<unk:word>: the word is not in the vocabulary\n");
    } else {
        rb_printf(out, "shading: %s; pale = little, dark red = the most (%.3f)\n", v->weight_measure,
                  wmax);
        if (any_unknown)
            rb_puts(out, "underlined: not in the vocabulary\n");
    }
}
