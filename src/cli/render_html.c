/* HTML renderer of `attnctl inspect`: one self-contained page (inline CSS,
 * data and script; nothing fetched from the network) with the prediction,
 * the review's tokens shaded by what the pooled representation draws from
 * them (drawn in HTML, so it shows even without JavaScript), and every
 * selected layer and head as a thumbnail grid with one map enlarged (drawn by
 * the inline script from the embedded numbers). */
#include <math.h>
#include <stdio.h>

#include "render.h"

/* A short number for the embedded data: 4 significant digits are plenty for
 * colours and hover values and keep big pages small. */
static void rb_short_number(ac_strbuf *out, double x)
{
    if (!isfinite(x)) {
        ac_strbuf_puts(out, "0");
        return;
    }
    char s[32];
    snprintf(s, sizeof s, "%.4g", x);
    for (char *p = s; *p; p++)
        if (*p == ',')
            *p = '.';
    ac_strbuf_puts(out, s);
}

static const char page_style[] =
    "body{font-family:\"DejaVu Sans\",Helvetica,Arial,sans-serif;margin:20px 28px;color:#222;"
    "background:#fff;max-width:1400px}\n"
    "h1{font-size:22px;margin:0 0 6px}\n"
    "h2{font-size:17px;margin:22px 0 6px}\n"
    ".verdict{font-size:16px;margin:4px 0}\n"
    ".probs{display:grid;grid-template-columns:max-content 280px max-content;gap:4px 10px;"
    "align-items:center;margin:8px 0;font-size:14px}\n"
    ".bar{height:14px;background:#eee;border-radius:3px;overflow:hidden}\n"
    ".bar span{display:block;height:100%;background:#9ecae1}\n"
    ".pred .bar span,.bar.pred span{background:#2171b5}\n"
    ".explain{color:#555;font-size:14px;margin:4px 0 8px;max-width:1000px}\n"
    ".review{line-height:2.1;font-size:16px;border:1px solid #ddd;padding:8px 12px;"
    "border-radius:6px;max-width:1100px}\n"
    ".tok{padding:2px 3px;border-radius:3px}\n"
    ".tok.unk{font-style:italic;text-decoration:underline dotted}\n"
    ".scale{display:inline-block;width:160px;height:12px;vertical-align:middle;border:1px solid #bbb}\n"
    ".layer{display:flex;align-items:center;gap:10px;margin:4px 0}\n"
    ".layer>b{width:70px;font-size:13px}\n"
    ".thumb{border:2px solid transparent;border-radius:4px;padding:2px;cursor:pointer;"
    "font-size:12px;text-align:center;background:none}\n"
    ".thumb.sel{border-color:#08519c}\n"
    ".thumb canvas{width:84px;height:84px;image-rendering:pixelated;display:block;"
    "border:1px solid #ccc}\n"
    ".maps{display:flex;flex-wrap:wrap;gap:16px 32px;align-items:flex-start}\n"
    "#status{min-height:1.5em;font-family:monospace;font-size:14px;margin:0 0 4px}\n"
    ".panels{display:flex;flex-wrap:wrap;gap:0 32px;align-items:flex-start}\n"
    ".panel{flex:1 1 460px;min-width:320px;max-width:760px}\n"
    ".scale.div{width:200px}\n"
    ".sum{font-size:13px;color:#555;margin:6px 0}\n"
    "#big text{font-size:var(--f)}\n"
    "#big text.hl{fill:#c00;font-weight:bold}\n";

/* The script only reads the embedded data and draws; it stays short. */
static const char page_script[] =
    "(function(){\n"
    "var D=JSON.parse(document.getElementById('inspect-data').textContent);\n"
    "var m=D.m,P=D.palette;\n"
    "function colour(v){var t=v/D.vmax;t=t<0?0:t>1?1:t;return P[Math.round(t*(P.length-1))];}\n"
    "function esc(s){return s.replace(/[&<>\"']/g,function(c){return{'&':'&amp;','<':'&lt;',"
    "'>':'&gt;','\"':'&quot;',\"'\":'&#39;'}[c];});}\n"
    "function cut(s){var a=Array.from(s);return a.length>12?a.slice(0,11).join('')+'\\u2026':s;}\n"
    "var thumbs=document.getElementById('thumbs'),big=document.getElementById('big'),"
    "status=document.getElementById('status'),buttons=[];\n"
    "function drawThumb(c,A){c.width=m;c.height=m;var g=c.getContext('2d');\n"
    " for(var q=0;q<m;q++)for(var k=0;k<m;k++){g.fillStyle=colour(A[q][k]);g.fillRect(k,q,1,1);}}\n"
    "function show(li,hi){\n"
    " buttons.forEach(function(b){b.classList.toggle('sel',b.dataset.l==li&&b.dataset.h==hi);});\n"
    " var A=D.attention[li][hi];\n"
    " var cell=Math.max(6,Math.min(30,Math.floor(640/m))),font=Math.max(8,Math.min(13,Math.floor(cell*0.75)));\n"
    " var longest=1;D.tokens.forEach(function(t){longest=Math.max(longest,Math.min(12,Array.from(t).length));});\n"
    " var lab=Math.round(longest*font*0.62)+8,gx=lab+4,gy=30+lab+4,w=gx+m*cell+12,h=gy+m*cell+12;\n"
    " var s=['<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"'+w+'\" height=\"'+h+'\" style=\"--f:'+font+'px\">'];\n"
    " s.push('<text x=\"'+gx+'\" y=\"18\" style=\"font-size:15px;font-weight:bold\">layer '+D.layers[li]+', head '+D.heads[hi]+"
    "(m<D.n?' (first '+m+' of '+D.n+' tokens)':'')+'</text>');\n"
    " for(var i=0;i<m;i++){var u=D.unknown[i]?' font-style=\"italic\" fill=\"#b22\"':'',cx=gx+i*cell+cell/2+font*0.35;\n"
    "  s.push('<text id=\"k'+i+'\" x=\"'+cx+'\" y=\"'+(gy-4)+'\" transform=\"rotate(-90 '+cx+' '+(gy-4)+')\"'+u+'>'+esc(cut(D.tokens[i]))+'</text>');\n"
    "  s.push('<text id=\"q'+i+'\" x=\"'+(gx-4)+'\" y=\"'+(gy+i*cell+cell/2+font*0.35)+'\" text-anchor=\"end\"'+u+'>'+esc(cut(D.tokens[i]))+'</text>');}\n"
    " s.push('<g transform=\"translate('+gx+' '+gy+')\" shape-rendering=\"crispEdges\">');\n"
    " for(var q=0;q<m;q++)for(var k=0;k<m;k++)s.push('<rect x=\"'+k*cell+'\" y=\"'+q*cell+'\" width=\"'+cell+'\" height=\"'+cell+'\" fill=\"'+colour(A[q][k])+'\" data-q=\"'+q+'\" data-k=\"'+k+'\"/>');\n"
    " s.push('<rect width=\"'+m*cell+'\" height=\"'+m*cell+'\" fill=\"none\" stroke=\"#888\"/></g></svg>');\n"
    " big.innerHTML=s.join('');\n"
    " status.textContent='Hover a cell: query \\u2192 key: weight';\n"
    "}\n"
    "var hl=[];\n"
    "big.addEventListener('mouseover',function(e){var t=e.target;if(t.dataset.q===undefined)return;\n"
    " var q=+t.dataset.q,k=+t.dataset.k,sel=document.querySelector('.thumb.sel'),A=D.attention[+sel.dataset.l][+sel.dataset.h];\n"
    " hl.forEach(function(x){x.classList.remove('hl');});hl=[document.getElementById('q'+q),document.getElementById('k'+k)];\n"
    " hl.forEach(function(x){x.classList.add('hl');});\n"
    " status.textContent=D.tokens[q]+' \\u2192 '+D.tokens[k]+': '+A[q][k].toFixed(4);});\n"
    "D.layers.forEach(function(layer,li){var row=document.createElement('div');row.className='layer';\n"
    " row.innerHTML='<b>layer '+layer+'</b>';\n"
    " D.heads.forEach(function(head,hi){var b=document.createElement('button');b.className='thumb';\n"
    "  b.dataset.l=li;b.dataset.h=hi;var c=document.createElement('canvas');drawThumb(c,D.attention[li][hi]);\n"
    "  b.appendChild(c);b.appendChild(document.createTextNode('head '+head));\n"
    "  b.addEventListener('click',function(){show(li,hi);});row.appendChild(b);buttons.push(b);});\n"
    " thumbs.appendChild(row);});\n"
    "show(0,0);\n"
    "})();\n";

static void colour_hex(ac_strbuf *out, const unsigned char rgb[3])
{
    ac_strbuf_printf(out, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

/* Ends a token's opening <span ...: its background (none when rgb is NULL:
 * too faint to matter), with light text on dark colours, then the token. */
static void close_shaded_token(ac_strbuf *out, const unsigned char *rgb, const char *token)
{
    if (rgb) {
        ac_strbuf_puts(out, " style=\"background:");
        colour_hex(out, rgb);
        ac_strbuf_puts(out, render_dark_text_on(rgb) ? "\"" : ";color:#fff\"");
    }
    ac_strbuf_puts(out, ">");
    ac_strbuf_xml_text(out, token);
    ac_strbuf_puts(out, "</span>");
}

static void scale_gradient(ac_strbuf *out, void (*scale)(double, unsigned char *))
{
    ac_strbuf_puts(out, "background:linear-gradient(to right");
    for (int i = 0; i <= 8; i++) {
        unsigned char rgb[3];
        scale(i / 8.0, rgb);
        ac_strbuf_puts(out, ",");
        colour_hex(out, rgb);
    }
    ac_strbuf_puts(out, ")");
}

static void html_review(ac_strbuf *out, const inspect_view *v)
{
    double wmax = 0.0;
    for (int i = 0; i < v->n; i++)
        if (v->token_weight[i] > wmax)
            wmax = v->token_weight[i];
    if (wmax <= 0.0)
        wmax = 1.0;
    ac_strbuf_puts(out, "<h2>What the classifier reads</h2>\n<p class=\"explain\">Tokens are shaded by ");
    ac_strbuf_xml_text(out, v->weight_measure);
    ac_strbuf_puts(out, ". Scale: <span class=\"scale\" style=\"");
    scale_gradient(out, render_shade_colour);
    ac_strbuf_puts(out, "\"></span> from 0 to ");
    rb_number_digits(out, wmax, 3);
    ac_strbuf_puts(out, " (the largest). Hover a token for its weight.");
    ac_strbuf_puts(out, "</p>\n<div class=\"review\">");
    for (int i = 0; i < v->n; i++) {
        double t = v->token_weight[i] / wmax;
        ac_strbuf_printf(out, "%s<span class=\"tok%s\" title=\"", i ? " " : "", v->unknown[i] ? " unk" : "");
        if (v->unknown[i])
            ac_strbuf_puts(out, "not in the vocabulary; ");
        ac_strbuf_puts(out, "weight ");
        rb_number_digits(out, v->token_weight[i], 3);
        ac_strbuf_puts(out, "\"");
        unsigned char rgb[3];
        render_shade_colour(t, rgb);
        close_shaded_token(out, t >= 0.05 ? rgb : NULL, v->tokens[i]);
    }
    ac_strbuf_puts(out, "</div>\n");
    if (v->full_len > v->n)
        ac_strbuf_printf(out,
                         "<p class=\"explain\">The review has %d tokens; the model read %d of them "
                         "(truncated as its tokenizer settings say).</p>\n",
                         v->full_len, v->n);
}

/* The review shaded by each token's attribution to the predicted class:
 * red toward it, blue against, white for nothing; hover for the listed
 * classes' scores (every class up to INSPECT_LISTED_CLASSES). */
static void html_attribution(ac_strbuf *out, const inspect_view *v)
{
    const char *label = v->labels[v->predicted];
    double amax = inspect_attr_max(v, v->n);
    ac_strbuf_puts(out, "<h2>Which words pushed it</h2>\n<p class=\"explain\">Each token is shaded by how much it "
                        "moved the logit of <b>");
    ac_strbuf_xml_text(out, label);
    ac_strbuf_printf(out, "</b> (%s", render_attr_name(v->attribution));
    if (v->attribution == AC_ATTR_IG)
        ac_strbuf_printf(out, ", %d steps", v->attr_steps);
    ac_strbuf_puts(out, ") from a baseline of ");
    ac_strbuf_xml_text(out, v->attr_baseline);
    ac_strbuf_puts(out, ". Scale: <span class=\"scale div\" style=\"background:linear-gradient(to right");
    for (int i = 0; i <= 10; i++) {
        unsigned char rgb[3];
        render_diverging_colour(-1.0 + i / 5.0, rgb);
        ac_strbuf_puts(out, ",");
        colour_hex(out, rgb);
    }
    ac_strbuf_puts(out, ")\"></span> from &minus;");
    rb_number_digits(out, amax, 3);
    ac_strbuf_puts(out, " (blue: against ");
    ac_strbuf_xml_text(out, label);
    ac_strbuf_puts(out, ") to +");
    rb_number_digits(out, amax, 3);
    ac_strbuf_puts(out, " (red: toward ");
    ac_strbuf_xml_text(out, label);
    ac_strbuf_puts(out, "). Hover a token for its score for each class listed above.</p>\n<div class=\"review attr\">");
    double sum = 0.0;
    int listed[INSPECT_LISTED_CLASSES];
    double rest;
    const int shown = inspect_listed_classes(v, listed, &rest);
    for (int i = 0; i < v->n; i++) {
        double a = inspect_attr(v, i);
        sum += a;
        ac_strbuf_printf(out, "%s<span class=\"tok%s\" title=\"", i ? " " : "", v->unknown[i] ? " unk" : "");
        if (v->unknown[i])
            ac_strbuf_puts(out, "not in the vocabulary; ");
        for (int k = 0; k < shown; k++) {
            const int c = listed[k];
            ac_strbuf_puts(out, k ? ", " : "");
            ac_strbuf_xml_text(out, v->labels[c]);
            ac_strbuf_puts(out, " ");
            ac_strbuf_printf(out, "%+.3g", v->attr_scores[(size_t)c * v->n + i]);
        }
        ac_strbuf_puts(out, "\"");
        double t = a / amax;
        unsigned char rgb[3];
        render_diverging_colour(t, rgb);
        close_shaded_token(out, fabs(t) >= 0.05 ? rgb : NULL, v->tokens[i]);
    }
    ac_strbuf_puts(out, "</div>\n<p class=\"sum\">Sum ");
    ac_strbuf_printf(out, "%+.4g", sum);
    ac_strbuf_puts(out, " = logit ");
    rb_number_digits(out, v->logits[v->predicted], 4);
    ac_strbuf_puts(out, " &minus; baseline logit ");
    rb_number_digits(out, v->baseline_logits[v->predicted], 4);
    ac_strbuf_puts(out, ", within ");
    rb_number_digits(out, 100.0 * v->attr_delta, 2);
    ac_strbuf_puts(out, " % (the completeness gap).</p>\n");
}

static void html_data(ac_strbuf *out, const inspect_view *v, int m)
{
    ac_strbuf_printf(out, "<script type=\"application/json\" id=\"inspect-data\">{\"n\":%d,\"m\":%d,\"vmax\":", v->n,
                     m);
    rb_short_number(out, inspect_vmax(v, m));
    ac_strbuf_puts(out, ",\"tokens\":[");
    for (int i = 0; i < m; i++) {
        ac_strbuf_puts(out, i ? "," : "");
        rb_json_string(out, v->tokens[i], 1);
    }
    ac_strbuf_puts(out, "],\"unknown\":[");
    for (int i = 0; i < m; i++)
        ac_strbuf_printf(out, "%s%d", i ? "," : "", v->unknown[i] ? 1 : 0);
    ac_strbuf_puts(out, "],\"layers\":[");
    for (int l = 0; l < v->layer_count; l++)
        ac_strbuf_printf(out, "%s%d", l ? "," : "", v->layer_first + l);
    ac_strbuf_puts(out, "],\"heads\":[");
    for (int h = 0; h < v->head_count; h++)
        ac_strbuf_printf(out, "%s%d", h ? "," : "", v->head_first + h);
    ac_strbuf_puts(out, "],\"palette\":[");
    for (int i = 0; i < 64; i++) {
        unsigned char rgb[3];
        render_heat_colour(i / 63.0, rgb);
        ac_strbuf_puts(out, i ? ",\"" : "\"");
        colour_hex(out, rgb);
        ac_strbuf_puts(out, "\"");
    }
    ac_strbuf_puts(out, "],\n\"attention\":[");
    for (int l = 0; l < v->layer_count; l++) {
        ac_strbuf_puts(out, l ? ",\n[" : "[");
        for (int h = 0; h < v->head_count; h++) {
            ac_strbuf_puts(out, h ? ",\n[" : "[");
            const float *a = inspect_map(v, v->layer_first + l, v->head_first + h);
            for (int q = 0; q < m; q++) {
                ac_strbuf_puts(out, q ? ",[" : "[");
                for (int k = 0; k < m; k++) {
                    ac_strbuf_puts(out, k ? "," : "");
                    rb_short_number(out, a[(size_t)q * v->n + k]);
                }
                ac_strbuf_puts(out, "]");
            }
            ac_strbuf_puts(out, "]");
        }
        ac_strbuf_puts(out, "]");
    }
    ac_strbuf_puts(out, "]}</script>\n");
}

void render_html(ac_strbuf *out, const inspect_view *v)
{
    int m = v->n < INSPECT_HTML_MAX_TOKENS ? v->n : INSPECT_HTML_MAX_TOKENS;
    ac_strbuf_puts(out, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                        "<title>attnctl inspect: ");
    ac_strbuf_xml_text(out, v->n_classes ? v->labels[v->predicted] : "pretrained encoder");
    ac_strbuf_puts(out, "</title>\n<style>\n");
    ac_strbuf_puts(out, page_style);
    ac_strbuf_puts(out, "</style>\n</head>\n<body>\n<h1>Attention in the classifier</h1>\n");

    if (v->n_classes == 0) {
        ac_strbuf_puts(out, "<p class=\"verdict\">A pretrained encoder (masked LM) without a "
                            "classifier: no prediction, its attention only.</p>\n<div>\n");
    } else {
        ac_strbuf_puts(out, "<p class=\"verdict\">Predicted <b>");
        ac_strbuf_xml_text(out, v->labels[v->predicted]);
        ac_strbuf_puts(out, "</b> with probability ");
        rb_number_digits(out, v->probs[v->predicted], 3);
        ac_strbuf_puts(out, ".</p>\n<div class=\"probs\">\n");
    }
    int listed[INSPECT_LISTED_CLASSES];
    double rest = 0.0;
    const int shown = v->n_classes ? inspect_listed_classes(v, listed, &rest) : 0;
    for (int k = 0; k < shown; k++) {
        const int c = listed[k];
        double p = v->probs[c];
        if (!(p >= 0.0))
            p = 0.0;
        if (p > 1.0)
            p = 1.0;
        ac_strbuf_puts(out, "<span>");
        ac_strbuf_xml_text(out, v->labels[c]);
        ac_strbuf_printf(out, "</span><div class=\"bar%s\"><span style=\"width:%d%%\"></span></div><span>",
                         c == v->predicted ? " pred" : "", (int)lround(p * 100.0));
        rb_number_digits(out, v->probs[c], 3);
        ac_strbuf_puts(out, "</span>\n");
    }
    if (shown < v->n_classes) {
        ac_strbuf_printf(out, "<span>%d more classes</span><div class=\"bar\"><span style=\"width:%d%%\">"
                              "</span></div><span>",
                         v->n_classes - shown, (int)lround((rest < 1.0 ? rest : 1.0) * 100.0));
        rb_number_digits(out, rest, 3);
        ac_strbuf_puts(out, "</span>\n");
    }
    ac_strbuf_puts(out, "</div>\n");

    ac_strbuf_puts(out, "<div class=\"panels\">\n");
    if (v->attribution != AC_ATTR_NONE) {
        ac_strbuf_puts(out, "<section class=\"panel\">\n");
        html_attribution(out, v);
        ac_strbuf_puts(out, "</section>\n");
    }
    ac_strbuf_puts(out, "<section class=\"panel\">\n");
    html_review(out, v);
    ac_strbuf_puts(out, "</section>\n</div>\n");

    ac_strbuf_puts(out, "<h2>Attention maps</h2>\n<p class=\"explain\">Each map shows how every query token "
                        "(row) spreads its attention over the key tokens (columns); each row sums to 1. "
                        "Colour scale: <span class=\"scale\" style=\"");
    scale_gradient(out, render_heat_colour);
    ac_strbuf_puts(out, "\"></span> from 0 to ");
    rb_number_digits(out, inspect_vmax(v, m), 3);
    ac_strbuf_puts(out, " (the largest weight drawn). Click a thumbnail to enlarge it; hover a cell for its "
                        "value.");
    if (m < v->n)
        ac_strbuf_printf(out, " Only the first %d of the %d tokens are drawn; --format json gives all.", m, v->n);
    ac_strbuf_puts(out, "</p>\n<div class=\"maps\"><div id=\"thumbs\"></div>\n<div><div id=\"status\"></div>"
                        "<div id=\"big\"></div></div></div>\n"
                        "<noscript><p>The attention maps are drawn by JavaScript, which is off; "
                        "<code>attnctl inspect --format json</code> or <code>--format svg</code> give the "
                        "same maps.</p></noscript>\n");
    html_data(out, v, m);
    ac_strbuf_puts(out, "<script>\n");
    ac_strbuf_puts(out, page_script);
    ac_strbuf_puts(out, "</script>\n</body>\n</html>\n");
}
