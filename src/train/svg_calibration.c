/* calibration.svg: a reliability diagram. For each confidence bin a bar up to
 * the accuracy of its examples, shaded by how many there are (a confident
 * model puts most examples in the last bins, hence a log scale), a red mark
 * at their mean confidence, and the diagonal where the two would be equal.
 * Same plain SVG 1.1 as training.svg, drawn with the helpers of curves.h. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "curves.h"

enum {
    SVG_WIDTH = 680,
    TITLE_HEIGHT = 34,
    MARGIN_LEFT = 70,
    MARGIN_TOP = 24,    /* between the title and the plot area */
    MARGIN_BOTTOM = 48, /* below the plot area (tick labels, axis title) */
    PLOT_SIZE = 420,    /* square: both axes are probabilities */
    LEGEND_GAP = 24,    /* between the plot area and the legend */
    LEGEND_SWATCHES = 5,
};

static const char COLOR_CONFIDENCE[] = "#d62728";
static const char COLOR_DIAGONAL[] = "#555";

/* Sequential blues (light -> dark) at t in [0, 1]. */
static void count_colour(double t, unsigned char rgb[3])
{
    static const unsigned char stops[3][3] = {{198, 219, 239}, {66, 146, 198}, {8, 48, 107}};
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    double pos = t * 2;
    int i = pos >= 2 ? 1 : (int)pos;
    double f = pos - i;
    for (int k = 0; k < 3; k++)
        rgb[k] = (unsigned char)lround(stops[i][k] + f * (stops[i + 1][k] - stops[i][k]));
}

/* Shade of a bin with `count` examples when the fullest bin has `max_count`. */
static void shade_of(int64_t count, int64_t max_count, unsigned char rgb[3])
{
    double t = max_count > 1 ? log((double)count) / log((double)max_count) : 1.0;
    count_colour(t, rgb);
}

static void draw_bins(ac_strbuf *sb, const svg_plot *p, const ac_reliability *r, int64_t max_count)
{
    const double bin_width = 1.0 / AC_CALIBRATION_BINS;
    ac_strbuf_printf(sb, "<g stroke=\"#fff\" stroke-width=\"1\">\n");
    for (int b = 0; b < AC_CALIBRATION_BINS; b++) {
        if (r->count[b] == 0)
            continue;
        unsigned char rgb[3];
        shade_of(r->count[b], max_count, rgb);
        double x0 = svg_x(p, b * bin_width), x1 = svg_x(p, (b + 1) * bin_width);
        double top = svg_y(p, r->accuracy[b]), bottom = svg_y(p, 0.0);
        ac_strbuf_printf(sb,
                         "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                         "fill=\"#%02x%02x%02x\"><title>confidence (%.3f, %.3f]: %lld examples, "
                         "accuracy %.4f, mean confidence %.4f</title></rect>\n",
                         x0, top, x1 - x0, bottom - top, rgb[0], rgb[1], rgb[2], b * bin_width,
                         (b + 1) * bin_width, (long long)r->count[b], r->accuracy[b], r->confidence[b]);
    }
    ac_strbuf_printf(sb, "</g>\n");
}

static void draw_confidence_marks(ac_strbuf *sb, const svg_plot *p, const ac_reliability *r)
{
    const double bin_width = 1.0 / AC_CALIBRATION_BINS;
    ac_strbuf_printf(sb, "<g stroke=\"%s\" stroke-width=\"2.5\">\n", COLOR_CONFIDENCE);
    for (int b = 0; b < AC_CALIBRATION_BINS; b++) {
        if (r->count[b] == 0)
            continue;
        double y = svg_y(p, r->confidence[b]);
        ac_strbuf_printf(sb, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
                         svg_x(p, b * bin_width) + 2, y, svg_x(p, (b + 1) * bin_width) - 2, y);
    }
    ac_strbuf_printf(sb, "</g>\n");
}

static void draw_diagonal(ac_strbuf *sb, const svg_plot *p)
{
    ac_strbuf_printf(sb,
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
               "stroke-width=\"1.5\" stroke-dasharray=\"6 3\"/>\n",
               svg_x(p, 0), svg_y(p, 0), svg_x(p, 1), svg_y(p, 1), COLOR_DIAGONAL);
}

/* Right of the plot: the count shades (1 .. the fullest bin, geometric steps),
 * then what the red marks and the dashed line mean. */
static void draw_legend(ac_strbuf *sb, const svg_plot *p, int64_t max_count)
{
    double x = p->x0 + p->w + LEGEND_GAP, y = p->y0 + 4;
    ac_strbuf_printf(sb, "<g font-size=\"12\">\n<text x=\"%.1f\" y=\"%.1f\">examples in bin</text>\n", x,
               y + 10);
    y += 22;
    int64_t last = 0;
    for (int k = 0; k < LEGEND_SWATCHES; k++) {
        double t = (double)k / (LEGEND_SWATCHES - 1);
        int64_t count = llround(pow((double)max_count, t));
        if (count <= last) /* few examples: fewer distinct shades */
            continue;
        last = count;
        unsigned char rgb[3];
        shade_of(count, max_count, rgb);
        ac_strbuf_printf(sb,
                         "<rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"14\" "
                         "fill=\"#%02x%02x%02x\"/>\n<text x=\"%.1f\" y=\"%.1f\">%lld</text>\n",
                         x, y, rgb[0], rgb[1], rgb[2], x + 28, y + 11, (long long)count);
        y += 20;
    }
    y += 14;
    ac_strbuf_printf(sb,
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
               "stroke-width=\"2.5\"/>\n<text x=\"%.1f\" y=\"%.1f\">mean confidence</text>\n",
               x, y + 7, x + 22, y + 7, COLOR_CONFIDENCE, x + 28, y + 11);
    y += 20;
    ac_strbuf_printf(sb,
               "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
               "stroke-width=\"1.5\" stroke-dasharray=\"6 3\"/>\n"
               "<text x=\"%.1f\" y=\"%.1f\">perfect calibration</text>\n</g>\n",
               x, y + 7, x + 22, y + 7, COLOR_DIAGONAL, x + 28, y + 11);
}

char *ac_calibration_svg(const ac_reliability *r, double ece, long n, const char *title)
{
    if (!title)
        title = "Reliability";
    int64_t max_count = 0;
    for (int b = 0; r && n > 0 && b < AC_CALIBRATION_BINS; b++)
        if (r->count[b] > max_count)
            max_count = r->count[b];
    char ece_text[32];
    if (isfinite(ece))
        snprintf(ece_text, sizeof ece_text, "%.4f", ece);
    else
        snprintf(ece_text, sizeof ece_text, "n/a");

    ac_strbuf sb = {0};
    int height = TITLE_HEIGHT + MARGIN_TOP + PLOT_SIZE + MARGIN_BOTTOM;
    ac_strbuf_printf(&sb,
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
               "<title>",
               SVG_WIDTH, height, SVG_WIDTH, height);
    ac_strbuf_xml_text(&sb, title);
    ac_strbuf_printf(&sb,
               " (ECE %s, N = %ld)</title>\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n"
               "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">",
               ece_text, n, MARGIN_LEFT);
    ac_strbuf_xml_text(&sb, title);
    ac_strbuf_printf(&sb, "<tspan font-weight=\"normal\"> (ECE %s, N = %ld)</tspan></text>\n", ece_text,
               n);

    svg_plot plot = {MARGIN_LEFT, TITLE_HEIGHT + MARGIN_TOP, PLOT_SIZE,
                           PLOT_SIZE,   {0.0, 1.0, 0.2},           {0.0, 1.0, 0.2}};
    svg_draw_axes(&sb, &plot, "confidence (largest probability)", "accuracy");
    if (max_count > 0) {
        draw_bins(&sb, &plot, r, max_count);
        /* the bars' white outlines cover the frame's bottom edge: draw it again */
        ac_strbuf_printf(&sb, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
                         plot.x0, plot.y0 + plot.h, plot.x0 + plot.w, plot.y0 + plot.h);
        draw_diagonal(&sb, &plot);
        draw_confidence_marks(&sb, &plot, r);
        draw_legend(&sb, &plot, max_count);
    } else {
        svg_draw_message(&sb, &plot, "no data");
    }
    ac_strbuf_printf(&sb, "</svg>\n");
    return ac_strbuf_take(&sb);
}
