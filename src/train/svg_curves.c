/* training.svg: two stacked panels sharing the step axis, loss (training and
 * validation) on top and validation accuracy below. Plain SVG 1.1 with inline
 * attributes only, so it renders the same in browsers, viewers and GitHub.
 * The drawing helpers declared in curves.h live here too. */
#include "curves.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    SVG_WIDTH = 760,
    PANEL_HEIGHT = 250,
    TITLE_HEIGHT = 34,
    MARGIN_LEFT = 70,
    MARGIN_RIGHT = 24,
    MARGIN_TOP = 24,    /* inside a panel, above the plot area */
    MARGIN_BOTTOM = 44, /* inside a panel, below the plot area (tick labels, axis title) */
    MAX_MARKERS = 80,   /* draw point markers only when there are few points */
};

static const char COLOR_TRAIN[] = "#1f77b4";
static const char COLOR_VAL_LOSS[] = "#ff7f0e";
static const char COLOR_VAL_ACC[] = "#2ca02c";

/* A "nice" tick spacing (1, 2 or 5 x 10^k) giving about `target` ticks over span. */
static double nice_step(double span, int target)
{
    if (!(span > 0))
        return 1.0;
    double raw = span / target;
    double mag = pow(10.0, floor(log10(raw)));
    double f = raw / mag;
    double nice = f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0;
    return nice * mag;
}

/* Range covering [lo, hi] rounded outwards to ticks; a flat range is widened. */
static svg_axis make_axis(double lo, double hi, int target_ticks)
{
    svg_axis a;
    if (!(hi > lo)) {
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 0.5;
        lo -= pad;
        hi += pad;
    }
    a.tick = nice_step(hi - lo, target_ticks);
    a.lo = floor(lo / a.tick) * a.tick;
    a.hi = ceil(hi / a.tick) * a.tick;
    if (a.hi <= a.lo)
        a.hi = a.lo + a.tick;
    return a;
}

/* Tick label without trailing noise: integers plain, others with enough digits for the spacing. */
static void format_tick(char *out, size_t n, double v, double tick)
{
    if (fabs(v) < tick * 1e-9)
        v = 0.0;
    if (fabs(v) >= 1e6 || (fabs(v) > 0 && fabs(v) < 1e-4)) {
        snprintf(out, n, "%.3g", v);
        return;
    }
    int decimals = tick >= 1.0 ? 0 : (int)ceil(-log10(tick) - 1e-9);
    if (decimals > 6)
        decimals = 6;
    snprintf(out, n, "%.*f", decimals, v);
}

double svg_x(const svg_plot *p, double x)
{
    return p->x0 + (x - p->xr.lo) / (p->xr.hi - p->xr.lo) * p->w;
}

double svg_y(const svg_plot *p, double y)
{
    return p->y0 + p->h - (y - p->yr.lo) / (p->yr.hi - p->yr.lo) * p->h;
}

void svg_draw_axes(ac_strbuf *sb, const svg_plot *p, const char *x_title, const char *y_title)
{
    char label[64];
    /* grid and y ticks */
    ac_strbuf_printf(sb, "<g font-size=\"11\" fill=\"#444\">\n");
    for (int i = 0;; i++) {
        double v = p->yr.lo + i * p->yr.tick;
        if (v > p->yr.hi + p->yr.tick * 1e-6)
            break;
        double y = svg_y(p, v);
        format_tick(label, sizeof label, v, p->yr.tick);
        ac_strbuf_printf(sb,
                         "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n"
                         "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n"
                         "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                         p->x0, y, p->x0 + p->w, y, p->x0 - 5, y, p->x0, y, p->x0 - 8, y + 4, label);
    }
    for (int i = 0;; i++) {
        double v = p->xr.lo + i * p->xr.tick;
        if (v > p->xr.hi + p->xr.tick * 1e-6)
            break;
        double x = svg_x(p, v);
        format_tick(label, sizeof label, v, p->xr.tick);
        ac_strbuf_printf(sb,
                         "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n"
                         "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                         x, p->y0 + p->h, x, p->y0 + p->h + 5, x, p->y0 + p->h + 18, label);
    }
    ac_strbuf_printf(sb, "</g>\n");
    /* frame and axis titles */
    ac_strbuf_printf(sb,
                     "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                     "stroke=\"#333\"/>\n",
                     p->x0, p->y0, p->w, p->h);
    ac_strbuf_printf(sb,
                     "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n",
                     p->x0 + p->w / 2, p->y0 + p->h + 36, x_title);
    ac_strbuf_printf(sb,
                     "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
                     "transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
                     p->x0 - 52, p->y0 + p->h / 2, p->x0 - 52, p->y0 + p->h / 2, y_title);
}

static double field_at(const ac_metric_point *pt, size_t field_offset)
{
    return *(const double *)((const char *)pt + field_offset);
}

/* One series as a path (gaps where values are not finite) plus markers. The
 * members' average is not on it: draw_soup marks it. */
static void draw_series(ac_strbuf *sb, const svg_plot *p, const ac_metric_point *pts, int n,
                        size_t field_offset, const char *color, int dashed)
{
    int pen_down = 0, any = 0;
    for (int i = 0; i < n; i++) {
        double v = field_at(&pts[i], field_offset);
        /* Each member of a weight average is a curve of its own. */
        if (i > 0 && pts[i].member != pts[i - 1].member)
            pen_down = 0;
        if (pts[i].soup || !isfinite(v)) {
            pen_down = 0;
            continue;
        }
        if (!any)
            ac_strbuf_printf(sb, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s d=\"", color,
                             dashed ? " stroke-dasharray=\"6 3\"" : "");
        any = 1;
        ac_strbuf_printf(sb, "%s%.1f %.1f", pen_down ? " L" : " M", svg_x(p, (double)pts[i].step),
                         svg_y(p, v));
        pen_down = 1;
    }
    if (!any)
        return;
    ac_strbuf_printf(sb, "\"/>\n");
    if (n > MAX_MARKERS)
        return;
    ac_strbuf_printf(sb, "<g fill=\"%s\">\n", color);
    for (int i = 0; i < n; i++) {
        double v = field_at(&pts[i], field_offset);
        if (!pts[i].soup && isfinite(v))
            ac_strbuf_printf(sb, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>\n",
                             svg_x(p, (double)pts[i].step), svg_y(p, v));
    }
    ac_strbuf_printf(sb, "</g>\n");
}

static void draw_diamond_at(ac_strbuf *sb, double x, double y, const char *fill, const char *stroke)
{
    const double r = 6;
    ac_strbuf_printf(sb,
                     "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f\" fill=\"%s\" "
                     "stroke=\"%s\" stroke-width=\"1.5\"/>\n",
                     x, y - r, x + r, y, x, y + r, x - r, y, fill, stroke);
}

/* With members, each member's curve starts after a faint rule, so three
 * curves side by side read as three models; with named, each is named at the
 * foot of the panel (the loss panel, where curves stay well above 0). */
static void draw_member_marks(ac_strbuf *sb, const svg_plot *p, const ac_metric_point *pts, int n,
                              int named)
{
    ac_strbuf_printf(sb, "<g font-size=\"11\" fill=\"#777\">\n");
    for (int i = 0; i < n; i++) {
        if (pts[i].soup || pts[i].member < 1 || (i > 0 && pts[i].member == pts[i - 1].member))
            continue;
        double x = p->x0;
        if (i > 0) {
            x = svg_x(p, (double)pts[i - 1].step);
            ac_strbuf_printf(sb,
                             "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#bbb\" "
                             "stroke-dasharray=\"2 3\"/>\n",
                             x, p->y0, x, p->y0 + p->h);
        }
        if (named)
            ac_strbuf_printf(sb, "<text x=\"%.1f\" y=\"%.1f\">member %d</text>\n", x + 5,
                             p->y0 + p->h - 6, pts[i].member);
    }
    ac_strbuf_printf(sb, "</g>\n");
}

/* The members' average: a diamond at the end of the run, named in the
 * legend. When it read below every member (kept_member, accuracy panel) its
 * own figure is a hollow diamond and the kept member's a filled one. */
static void draw_soup(ac_strbuf *sb, const svg_plot *p, const ac_metric_point *pts, int n,
                      size_t field_offset, const char *color, int with_mean)
{
    for (int i = 0; i < n; i++) {
        double v = field_at(&pts[i], field_offset);
        if (!pts[i].soup || !isfinite(v))
            continue;
        const double x = svg_x(p, (double)pts[i].step);
        if (with_mean && pts[i].kept_member > 0 && isfinite(pts[i].mean_val_accuracy))
            draw_diamond_at(sb, x, svg_y(p, pts[i].mean_val_accuracy), "#fff", color);
        draw_diamond_at(sb, x, svg_y(p, v), color, "#333");
    }
}

typedef enum { LEGEND_LINE, LEGEND_DASHED, LEGEND_DIAMOND, LEGEND_HOLLOW_DIAMOND } legend_style;

typedef struct {
    char name[64];
    const char *color;
    legend_style style;
} legend_entry;

/* About how wide 12px DejaVu Sans sets s: digits are wider than letters. */
static double text_width(const char *s)
{
    double w = 0;
    for (; *s; s++)
        w += *s >= '0' && *s <= '9' ? 7.6 : 6.8;
    return w;
}

/* A one-row legend above the plot area, right-aligned, so it never hides data. */
static void draw_legend(ac_strbuf *sb, const svg_plot *p, const legend_entry *entries, int n)
{
    const double swatch = 22, gap = 18;
    double total = 0;
    for (int i = 0; i < n; i++)
        total += swatch + 6 + text_width(entries[i].name) + (i ? gap : 0);
    double x = p->x0 + p->w - total, y = p->y0 - 8;
    ac_strbuf_printf(sb, "<g font-size=\"12\">\n");
    for (int i = 0; i < n; i++) {
        const legend_entry *e = &entries[i];
        if (i)
            x += gap;
        if (e->style == LEGEND_DIAMOND || e->style == LEGEND_HOLLOW_DIAMOND)
            draw_diamond_at(sb, x + swatch / 2, y - 4,
                            e->style == LEGEND_DIAMOND ? e->color : "#fff",
                            e->style == LEGEND_DIAMOND ? "#333" : e->color);
        else
            ac_strbuf_printf(sb,
                             "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                             "stroke-width=\"3\"%s/>\n",
                             x, y - 4, x + swatch, y - 4, e->color,
                             e->style == LEGEND_DASHED ? " stroke-dasharray=\"6 3\"" : "");
        ac_strbuf_printf(sb, "<text x=\"%.1f\" y=\"%.1f\">", x + swatch + 6, y);
        ac_strbuf_xml_text(sb, e->name);
        ac_strbuf_printf(sb, "</text>\n");
        x += swatch + 6 + text_width(e->name);
    }
    ac_strbuf_printf(sb, "</g>\n");
}

/* The accuracy panel's legend entries for the members' average (at most 2). */
static int soup_legend(const ac_metric_point *pts, int n, legend_entry *out)
{
    int members = 0;
    for (int i = 0; i < n; i++)
        members = pts[i].member > members ? pts[i].member : members;
    for (int i = n - 1; i >= 0; i--) {
        if (!pts[i].soup || !isfinite(pts[i].val_accuracy))
            continue;
        if (pts[i].kept_member > 0 && isfinite(pts[i].mean_val_accuracy)) {
            out[0] = (legend_entry){.color = COLOR_VAL_ACC, .style = LEGEND_HOLLOW_DIAMOND};
            snprintf(out[0].name, sizeof out[0].name, "mean %.4f (below every member)",
                     pts[i].mean_val_accuracy);
            out[1] = (legend_entry){.color = COLOR_VAL_ACC, .style = LEGEND_DIAMOND};
            snprintf(out[1].name, sizeof out[1].name, "member %d kept %.4f",
                     pts[i].kept_member, pts[i].val_accuracy);
            return 2;
        }
        out[0] = (legend_entry){.color = COLOR_VAL_ACC, .style = LEGEND_DIAMOND};
        snprintf(out[0].name, sizeof out[0].name, "mean of %d members %.4f", members,
                 pts[i].val_accuracy);
        return 1;
    }
    return 0;
}

static void field_range(const ac_metric_point *pts, int n, size_t field_offset, double *lo,
                        double *hi, int *count)
{
    for (int i = 0; i < n; i++) {
        double v = field_at(&pts[i], field_offset);
        if (!isfinite(v))
            continue;
        if (*count == 0 || v < *lo)
            *lo = v;
        if (*count == 0 || v > *hi)
            *hi = v;
        (*count)++;
    }
}

void svg_draw_message(ac_strbuf *sb, const svg_plot *p, const char *msg)
{
    ac_strbuf_printf(sb,
                     "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" fill=\"#777\" "
                     "text-anchor=\"middle\">%s</text>\n",
                     p->x0 + p->w / 2, p->y0 + p->h / 2, msg);
}

char *ac_curves_svg(const ac_metric_point *pts, int n, const ac_curves_labels *labels)
{
    static const ac_curves_labels CLASSIFIER = {"Training", "validation loss",
                                                "validation accuracy"};
    if (!labels)
        labels = &CLASSIFIER;
    ac_strbuf sb = {0};
    int height = TITLE_HEIGHT + 2 * PANEL_HEIGHT;
    ac_strbuf_printf(&sb,
                     "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                     "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
                     "<title>attnctl training curves</title>\n"
                     "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n"
                     "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">",
                     SVG_WIDTH, height, SVG_WIDTH, height, MARGIN_LEFT);
    ac_strbuf_xml_text(&sb, labels->title);
    ac_strbuf_printf(&sb, "</text>\n");

    long max_step = 1;
    for (int i = 0; i < n; i++)
        if (pts[i].step > max_step)
            max_step = pts[i].step;
    svg_axis xr = make_axis(0.0, (double)max_step, 8);
    xr.lo = 0.0;

    /* loss panel */
    svg_plot loss = {MARGIN_LEFT,
                     TITLE_HEIGHT + MARGIN_TOP,
                     SVG_WIDTH - MARGIN_LEFT - MARGIN_RIGHT,
                     PANEL_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM,
                     xr,
                     {0, 1, 0.2}};
    double lo = 0, hi = 0;
    int count = 0, n_train = 0, n_val = 0;
    field_range(pts, n, offsetof(ac_metric_point, train_loss), &lo, &hi, &n_train);
    count = n_train;
    field_range(pts, n, offsetof(ac_metric_point, val_loss), &lo, &hi, &count);
    n_val = count - n_train;
    if (count) {
        loss.yr = make_axis(lo < 0 ? lo : 0.0, hi, 5);
        if (loss.yr.lo < 0 && lo >= 0)
            loss.yr.lo = 0;
    }
    svg_draw_axes(&sb, &loss, "step", "loss");
    draw_member_marks(&sb, &loss, pts, n, 1);
    if (count) {
        draw_series(&sb, &loss, pts, n, offsetof(ac_metric_point, train_loss), COLOR_TRAIN, 0);
        draw_series(&sb, &loss, pts, n, offsetof(ac_metric_point, val_loss), COLOR_VAL_LOSS, 1);
        draw_soup(&sb, &loss, pts, n, offsetof(ac_metric_point, val_loss), COLOR_VAL_LOSS, 0);
        legend_entry entries[2];
        int k = 0;
        if (n_train) {
            entries[k] = (legend_entry){.color = COLOR_TRAIN, .style = LEGEND_LINE};
            snprintf(entries[k++].name, sizeof entries[0].name, "training loss");
        }
        if (n_val) {
            entries[k] = (legend_entry){.color = COLOR_VAL_LOSS, .style = LEGEND_DASHED};
            snprintf(entries[k++].name, sizeof entries[0].name, "%s", labels->val_loss);
        }
        draw_legend(&sb, &loss, entries, k);
    } else {
        svg_draw_message(&sb, &loss, "no evaluations yet");
    }

    /* accuracy panel */
    svg_plot acc = {MARGIN_LEFT, TITLE_HEIGHT + PANEL_HEIGHT + MARGIN_TOP, loss.w, loss.h, xr,
                    {0, 1, 0.2}};
    lo = hi = 0;
    count = 0;
    field_range(pts, n, offsetof(ac_metric_point, val_accuracy), &lo, &hi, &count);
    for (int i = 0; count && i < n; i++) { /* a mean that was not kept is drawn too */
        double mean = pts[i].mean_val_accuracy;
        if (pts[i].soup && pts[i].kept_member > 0 && isfinite(mean)) {
            lo = mean < lo ? mean : lo;
            hi = mean > hi ? mean : hi;
        }
    }
    if (count) {
        acc.yr = make_axis(lo, hi, 5);
        if (acc.yr.lo < 0)
            acc.yr.lo = 0;
        if (acc.yr.hi > 1)
            acc.yr.hi = 1;
        if (acc.yr.hi <= acc.yr.lo)
            acc.yr = (svg_axis){0, 1, 0.2};
    }
    svg_draw_axes(&sb, &acc, "step", labels->accuracy);
    draw_member_marks(&sb, &acc, pts, n, 0);
    if (count) {
        draw_series(&sb, &acc, pts, n, offsetof(ac_metric_point, val_accuracy), COLOR_VAL_ACC, 0);
        draw_soup(&sb, &acc, pts, n, offsetof(ac_metric_point, val_accuracy), COLOR_VAL_ACC, 1);
        legend_entry entries[3] = {{.color = COLOR_VAL_ACC, .style = LEGEND_LINE}};
        snprintf(entries[0].name, sizeof entries[0].name, "%s", labels->accuracy);
        draw_legend(&sb, &acc, entries, 1 + soup_legend(pts, n, entries + 1));
    } else {
        svg_draw_message(&sb, &acc, n ? "no validation data" : "no evaluations yet");
    }

    ac_strbuf_printf(&sb, "</svg>\n");
    return ac_strbuf_take(&sb);
}
