#!/bin/sh
# The source files' dependency graph, from the symbols their objects define
# and use (nm): a file may use only files of its own layer or of a layer
# below it (util, text, nn, io, train, cli), and no file may reach itself
# through others (no circle). Prints the offending pairs or circles.
# Usage: tests/file_graph.sh OBJECT.o...
set -u
if [ $# -eq 0 ]; then echo "usage: $0 OBJECT.o..." >&2; exit 2; fi
for o in "$@"; do
    nm "$o" | awk -v f="$o" 'NF == 3 && $2 ~ /^[TDBRC]$/ { print "D", f, $3 }
                            NF == 2 && $1 == "U" { print "U", f, $2 }'
done | awk '
function layer(f,   n, p) {
    n = split(f, p, "/")
    for (i = 1; i < n; i++)
        if (p[i] in rank) return rank[p[i]]
    return 99
}
function short(f) { sub(/^.*\/src\//, "src/", f); sub(/\.o$/, ".c", f); return f }
BEGIN { rank["util"] = 0; rank["text"] = 1; rank["nn"] = 2; rank["io"] = 3; rank["train"] = 4; rank["cli"] = 5 }
$1 == "D" { owner[$3] = $2; files[$2] = 1; next }
{ uses[++nu] = $2 SUBSEP $3; files[$2] = 1 }
END {
    bad = 0
    for (k = 1; k <= nu; k++) {
        split(uses[k], u, SUBSEP)
        if (!(u[2] in owner) || owner[u[2]] == u[1]) continue
        a = u[1]; b = owner[u[2]]
        if (!((a, b) in edge)) {
            edge[a, b] = 1
            if (layer(b) > layer(a)) { printf "upward: %s uses %s of %s\n", short(a), u[2], short(b); bad = 1 }
        }
    }
    n = 0
    for (f in files) name[++n] = f
    for (i = 1; i <= n; i++) for (j = 1; j <= n; j++) reach[i, j] = ((name[i], name[j]) in edge)
    for (k = 1; k <= n; k++) for (i = 1; i <= n; i++) if (reach[i, k]) for (j = 1; j <= n; j++) if (reach[k, j]) reach[i, j] = 1
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
        if (reach[i, j] && reach[j, i]) { printf "circle: %s and %s reach each other\n", short(name[i]), short(name[j]); bad = 1 }
    if (!bad) printf "file graph: %d files, no upward use, no circle\n", n
    exit bad
}'
