/* SVG renderer of `attnctl inspect`: one heatmap per selected head (queries
 * as rows, keys as columns, key labels rotated on top), laid out in a grid
 * (a row per layer), with a title, the prediction and a colour legend. Also
 * the colour scales shared with the HTML and terminal renderers. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "render.h"

/* ----------------------------------------------------------------- colours */

static void interpolate(const unsigned char (*stops)[3], int n_stops, double t, unsigned char rgb[3])
{
    if (!(t > 0.0))
        t = 0.0; /* also catches NaN */
    if (t > 1.0)
        t = 1.0;
    double x = t * (n_stops - 1);
    int i = (int)floor(x);
    if (i >= n_stops - 1)
        i = n_stops - 2;
    double f = x - i;
    for (int c = 0; c < 3; c++)
        rgb[c] = (unsigned char)lround(stops[i][c] + f * (stops[i + 1][c] - stops[i][c]));
}

/* ColorBrewer "Blues": light for little attention, dark for much. */
static const unsigned char heat_stops[][3] = {
    {255, 255, 255}, {222, 235, 247}, {198, 219, 239}, {158, 202, 225}, {107, 174, 214},
    {66, 146, 198},  {33, 113, 181},  {8, 81, 156},    {8, 48, 107},
};

/* ColorBrewer "YlOrRd", a highlighter scale. */
static const unsigned char shade_stops[][3] = {
    {255, 255, 204}, {255, 237, 160}, {254, 217, 118}, {254, 178, 76}, {253, 141, 60},
    {252, 78, 42},   {227, 26, 28},   {189, 0, 38},    {128, 0, 38},
};

/* ColorBrewer "RdBu" (11 classes), reversed: blue for against, red for toward. */
static const unsigned char diverging_stops[][3] = {
    {5, 48, 97},     {33, 102, 172}, {67, 147, 195}, {146, 197, 222}, {209, 229, 240}, {247, 247, 247},
    {253, 219, 199}, {244, 165, 130}, {214, 96, 77},  {178, 24, 43},   {103, 0, 31},
};

void render_diverging_colour(double t, unsigned char rgb[3])
{
    if (isnan(t))
        t = 0.0;
    t = t < -1.0 ? -1.0 : t > 1.0 ? 1.0 : t;
    interpolate(diverging_stops, (int)(sizeof diverging_stops / sizeof diverging_stops[0]),
                (t + 1.0) / 2.0, rgb);
}

void render_heat_colour(double t, unsigned char rgb[3])
{
    interpolate(heat_stops, (int)(sizeof heat_stops / sizeof heat_stops[0]), t, rgb);
}

void render_shade_colour(double t, unsigned char rgb[3])
{
    interpolate(shade_stops, (int)(sizeof shade_stops / sizeof shade_stops[0]), t, rgb);
}

int render_dark_text_on(const unsigned char rgb[3])
{
    double luminance = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2];
    return luminance > 140.0;
}

/* -------------------------------------------------------------------- SVG */

#define LABEL_MAX_CHARS 12
#define PANEL_GAP 28
#define MARGIN 16
#define HEADER_HEIGHT 96

static int clampi(int x, int lo, int hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

static void svg_legend(ac_strbuf *out, int x, int y, double vmax)
{
    const int width = 220, height = 12;
    ac_strbuf_printf(out, "<defs><linearGradient id=\"heat\" x1=\"0\" x2=\"1\" y1=\"0\" y2=\"0\">");
    for (int i = 0; i <= 16; i++) {
        unsigned char rgb[3];
        render_heat_colour(i / 16.0, rgb);
        ac_strbuf_printf(out, "<stop offset=\"%d%%\" stop-color=\"#%02x%02x%02x\"/>", i * 100 / 16, rgb[0],
                         rgb[1], rgb[2]);
    }
    ac_strbuf_puts(out, "</linearGradient></defs>\n");
    ac_strbuf_printf(out, "<text x=\"%d\" y=\"%d\" font-size=\"12\">attention weight</text>\n", x, y + 10);
    int bx = x + 110;
    ac_strbuf_printf(out,
                     "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"url(#heat)\" "
                     "stroke=\"#888\" stroke-width=\"1\"/>\n",
                     bx, y, width, height);
    for (int i = 0; i <= 4; i++) {
        int tx = bx + width * i / 4;
        ac_strbuf_printf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\"/>", tx,
                         y + height, tx, y + height + 4);
        ac_strbuf_printf(out, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">", tx,
                         y + height + 16);
        rb_number_digits(out, vmax * i / 4.0, 2);
        ac_strbuf_puts(out, "</text>\n");
    }
}

/* The attribution panel: one bar per token (the first m), up and red when the
 * token pushed toward the predicted class, down and blue when against, on a
 * scale of +-amax; token labels underneath. Returns the panel's height. */
#define ATTR_BAR_H 64
#define ATTR_AXIS_W 56
static int svg_attr_height(int label_space)
{
    return 44 + 2 * ATTR_BAR_H + 8 + label_space + PANEL_GAP;
}

static void svg_attr_bars(ac_strbuf *out, const inspect_view *v, int m, int x0, int y0, int bar_w,
                          int font)
{
    double amax = inspect_attr_max(v, m);
    const char *label = v->labels[v->predicted];
    ac_strbuf_printf(out, "<g>\n<text x=\"%d\" y=\"%d\" font-size=\"14\" font-weight=\"bold\">", x0, y0 + 16);
    ac_strbuf_puts(out, "Attribution to ");
    ac_strbuf_xml_text(out, label);
    ac_strbuf_printf(out, " (%s", render_attr_name(v->attribution));
    if (v->attribution == AC_ATTR_IG)
        ac_strbuf_printf(out, ", %d steps", v->attr_steps);
    ac_strbuf_puts(out, ", completeness gap ");
    rb_number_digits(out, 100.0 * v->attr_delta, 2);
    ac_strbuf_puts(out, " %)");
    if (m < v->n)
        ac_strbuf_printf(out, " \xE2\x80\x94 first %d of %d tokens", m, v->n);
    ac_strbuf_puts(out, "</text>\n");
    ac_strbuf_printf(out, "<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"#555\">red, up: pushed toward ", x0,
                     y0 + 32);
    ac_strbuf_xml_text(out, label);
    ac_strbuf_puts(out, "; blue, down: against. Baseline: ");
    ac_strbuf_xml_text(out, v->attr_baseline);
    ac_strbuf_puts(out, ".</text>\n");
    int gx = x0 + ATTR_AXIS_W, top = y0 + 44, zero = top + ATTR_BAR_H;
    /* axis: +amax, 0, -amax */
    for (int k = -1; k <= 1; k++) {
        int y = zero - k * ATTR_BAR_H;
        ac_strbuf_printf(out, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">%s", gx - 6, y + 4,
                         k > 0 ? "+" : k < 0 ? "\xE2\x88\x92" : "");
        rb_number_digits(out, k ? amax : 0.0, 2);
        ac_strbuf_printf(out, "</text><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\"/>\n", gx - 3, y,
                         gx + m * bar_w, y, k ? "#ddd" : "#888");
    }
    ac_strbuf_puts(out, "<g shape-rendering=\"crispEdges\">\n");
    for (int i = 0; i < m; i++) {
        double a = inspect_attr(v, i);
        int h = (int)lround(fabs(a) / amax * ATTR_BAR_H);
        int x = gx + i * bar_w + 1;
        ac_strbuf_printf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"><title>", x,
                         a >= 0 ? zero - h : zero, bar_w - 2, h, a >= 0 ? "#b2182b" : "#2166ac");
        ac_strbuf_xml_text(out, v->tokens[i]);
        ac_strbuf_puts(out, ": ");
        rb_number_digits(out, a, 3);
        ac_strbuf_puts(out, "</title></rect>\n");
    }
    ac_strbuf_puts(out, "</g>\n");
    int ly = zero + ATTR_BAR_H + 8;
    for (int i = 0; i < m; i++) {
        int cx = gx + i * bar_w + bar_w / 2 + font * 35 / 100;
        ac_strbuf_printf(out, "<text x=\"%d\" y=\"%d\" font-size=\"%d\" text-anchor=\"end\" "
                              "transform=\"rotate(-90 %d %d)\"%s>",
                         cx, ly, font, cx, ly, v->unknown[i] ? " font-style=\"italic\" fill=\"#b22\"" : "");
        rb_xml_text_cut(out, v->tokens[i], LABEL_MAX_CHARS);
        ac_strbuf_puts(out, "</text>\n");
    }
    ac_strbuf_puts(out, "</g>\n");
}

void render_svg(ac_strbuf *out, const inspect_view *v)
{
    int m = v->n < INSPECT_SVG_MAX_TOKENS ? v->n : INSPECT_SVG_MAX_TOKENS;
    int cell = clampi(480 / m, 9, 28);
    int font = clampi(cell * 3 / 4, 8, 13);
    int longest = 1, any_unknown = 0;
    for (int i = 0; i < m; i++) {
        int len = render_utf8_length(v->tokens[i]);
        if (len > longest)
            longest = len;
        any_unknown |= v->unknown[i];
    }
    if (longest > LABEL_MAX_CHARS)
        longest = LABEL_MAX_CHARS;
    /* Rough width of the longest label: wide glyphs at 0.62 em. */
    int label_space = (int)(longest * font * 0.62) + 8;
    int panel_w = label_space + 4 + m * cell + PANEL_GAP;
    int panel_h = 24 + label_space + 4 + m * cell + PANEL_GAP;
    int cols = v->head_count <= 4 ? v->head_count : 4;
    int rows_per_layer = (v->head_count + cols - 1) / cols;
    int rows = v->layer_count * rows_per_layer;
    int width = 2 * MARGIN + cols * panel_w;
    if (width < 640)
        width = 640;
    int attr_h = 0, bar_w = clampi(480 / m, 12, 28);
    if (v->attribution != AC_ATTR_NONE) {
        attr_h = svg_attr_height(label_space);
        if (width < 2 * MARGIN + ATTR_AXIS_W + m * bar_w + 8)
            width = 2 * MARGIN + ATTR_AXIS_W + m * bar_w + 8;
    }
    int top = HEADER_HEIGHT + attr_h; /* where the heatmaps start */
    int height = top + rows * panel_h + MARGIN;
    double vmax = inspect_vmax(v, m);

    ac_strbuf_printf(out,
                     "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                     "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                     "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
                     "fill=\"#222\">\n",
                     width, height, width, height);
    ac_strbuf_puts(out, "<title>attnctl inspect: attention maps</title>\n");
    ac_strbuf_printf(out, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", width, height);

    /* Header: what is drawn, the prediction, the legend. */
    ac_strbuf_printf(out, "<text x=\"%d\" y=\"26\" font-size=\"18\" font-weight=\"bold\">", MARGIN);
    if (v->n_classes == 0) {
        ac_strbuf_puts(out, "Attention maps \xE2\x80\x94 pretrained encoder (masked LM), no "
                            "prediction</text>\n");
    } else {
        ac_strbuf_puts(out, "Attention maps \xE2\x80\x94 predicted: ");
        ac_strbuf_xml_text(out, v->labels[v->predicted]);
        ac_strbuf_puts(out, " (");
        rb_number_digits(out, v->probs[v->predicted], 3);
        ac_strbuf_puts(out, ")</text>\n");
    }
    ac_strbuf_printf(out, "<text x=\"%d\" y=\"48\" font-size=\"12\" fill=\"#555\">", MARGIN);
    int listed[INSPECT_LISTED_CLASSES];
    double rest = 0.0;
    int shown = v->n_classes ? inspect_listed_classes(v, listed, &rest) : 0;
    for (int k = 0; k < shown; k++) {
        ac_strbuf_puts(out, k ? " \xC2\xB7 " : "");
        ac_strbuf_xml_text(out, v->labels[listed[k]]);
        ac_strbuf_puts(out, " ");
        rb_number_digits(out, v->probs[listed[k]], 3);
    }
    if (shown < v->n_classes) {
        ac_strbuf_printf(out, " \xC2\xB7 %d more classes ", v->n_classes - shown);
        rb_number_digits(out, rest, 3);
    }
    ac_strbuf_puts(out, " \xE2\x80\x94 rows: queries, columns: keys; each row sums to 1");
    if (m < v->n)
        ac_strbuf_printf(out, " \xE2\x80\x94 first %d of %d tokens drawn", m, v->n);
    if (any_unknown)
        ac_strbuf_puts(out, " \xE2\x80\x94 red italic: not in the vocabulary");
    ac_strbuf_puts(out, "</text>\n");
    svg_legend(out, MARGIN, 60, vmax);
    if (v->attribution != AC_ATTR_NONE)
        svg_attr_bars(out, v, m, MARGIN, HEADER_HEIGHT, bar_w, font);

    for (int l = 0; l < v->layer_count; l++)
        for (int h = 0; h < v->head_count; h++) {
            int layer = v->layer_first + l, head = v->head_first + h;
            int row = l * rows_per_layer + h / cols, col = h % cols;
            int x0 = MARGIN + col * panel_w, y0 = top + row * panel_h;
            int gx = x0 + label_space + 4, gy = y0 + 24 + label_space + 4;
            ac_strbuf_printf(out, "<g>\n<text x=\"%d\" y=\"%d\" font-size=\"14\" font-weight=\"bold\">layer %d, head %d",
                             gx, y0 + 16, layer, head);
            if (m < v->n)
                ac_strbuf_printf(out, " (first %d of %d tokens)", m, v->n);
            ac_strbuf_puts(out, "</text>\n");
            /* Key labels on top (rotated), query labels on the left. */
            for (int i = 0; i < m; i++) {
                const char *style = v->unknown[i] ? " font-style=\"italic\" fill=\"#b22\"" : "";
                int cx = gx + i * cell + cell / 2 + font * 35 / 100;
                ac_strbuf_printf(out,
                                 "<text x=\"%d\" y=\"%d\" font-size=\"%d\" transform=\"rotate(-90 %d %d)\"%s>",
                                 cx, gy - 4, font, cx, gy - 4, style);
                rb_xml_text_cut(out, v->tokens[i], LABEL_MAX_CHARS);
                ac_strbuf_puts(out, "</text>\n");
                ac_strbuf_printf(out, "<text x=\"%d\" y=\"%d\" font-size=\"%d\" text-anchor=\"end\"%s>", gx - 4,
                                 gy + i * cell + cell / 2 + font * 35 / 100, font, style);
                rb_xml_text_cut(out, v->tokens[i], LABEL_MAX_CHARS);
                ac_strbuf_puts(out, "</text>\n");
            }
            ac_strbuf_printf(out, "<g transform=\"translate(%d %d)\" shape-rendering=\"crispEdges\">\n", gx, gy);
            const float *a = inspect_map(v, layer, head);
            for (int q = 0; q < m; q++)
                for (int k = 0; k < m; k++) {
                    double w = a[(size_t)q * v->n + k];
                    unsigned char rgb[3];
                    render_heat_colour(w / vmax, rgb);
                    ac_strbuf_printf(out,
                                     "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#%02x%02x%02x\">",
                                     k * cell, q * cell, cell, cell, rgb[0], rgb[1], rgb[2]);
                    if (m <= 32) { /* hover values, while the file stays small */
                        ac_strbuf_puts(out, "<title>");
                        ac_strbuf_xml_text(out, v->tokens[q]);
                        ac_strbuf_puts(out, " \xE2\x86\x92 ");
                        ac_strbuf_xml_text(out, v->tokens[k]);
                        ac_strbuf_puts(out, ": ");
                        rb_number_digits(out, w, 3);
                        ac_strbuf_puts(out, "</title>");
                    }
                    ac_strbuf_puts(out, "</rect>\n");
                }
            ac_strbuf_printf(out,
                             "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n"
                             "</g>\n</g>\n",
                             m * cell, m * cell);
        }
    ac_strbuf_puts(out, "</svg>\n");
}
