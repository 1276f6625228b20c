#!/bin/sh
# The main job, end to end: train, evaluate, predict, inspect.
#
#   sh data/demo.sh [ATTNCTL]          (make demo passes build/attnctl)
#   sh data/demo.sh --full [ATTNCTL]   (make demo-full: the full recipe)
#
# On the IMDB data (../shared/data/imdb) when it is there, else on the small
# sample written for this project (data/sample_*.csv); it says which.
# The short demo trains the default recipe as one model (--members 1): about
# 3 to 4 minutes on 2 cores. --full trains the whole recipe, the mean of three
# members, and then a student that also reads IMDB's 50,000 unlabelled
# reviews the first model is sure of (about 13 minutes on 2 cores).
set -eu
full=0
if [ "${1:-}" = --full ]; then
    full=1
    shift
fi
bin=${1:-./attnctl}
imdb=../shared/data/imdb
if [ -f "$imdb/train.csv.gz" ] && [ -f "$imdb/test.csv.gz" ]; then
    train=$imdb/train.csv.gz; test=$imdb/test.csv.gz; config=models/default.json
    if [ $full = 1 ]; then
        out=models/imdb-full
        echo "demo: the full recipe on IMDB ($train, 25,000 reviews), models/default.json"
    else
        out=models/imdb
        echo "demo: training on IMDB ($train, 25,000 reviews): models/default.json as one model"
    fi
else
    echo "demo: $imdb not found; training on the project's small sample (data/sample_train.csv)"
    train=data/sample_train.csv; test=data/sample_test.csv; out=models/sample; config=models/default.json
    full=0
fi
# train DIR [OPTIONS...]: the preset on $train into DIR, unless DIR holds a model
train() {
    dir=$1
    shift
    if [ -f "$dir/model.safetensors" ]; then
        echo "demo: $dir already holds a model; using it (rm -r $dir to train again)"
        return
    fi
    rm -rf "$dir"
    "$bin" train --config "$config" "$train" --out "$dir" "$@"
}
if [ $full = 1 ] && [ -f "$imdb/unsup.csv.gz" ]; then
    # Self-training: a first model (the mean of three members) labels the
    # unlabelled reviews, and the ones it is sure of join the training rows of
    # a second, one model (its 57,000 rows already smooth what members would).
    echo "demo: first the teacher ($out-teacher), then a student that also reads the"
    echo "demo: unlabelled reviews the teacher is sure of ($imdb/unsup.csv.gz)"
    train "$out-teacher"
    echo "demo: the student"
    train "$out" --teacher "$out-teacher" --unlabelled "$imdb/unsup.csv.gz" --members 1
elif [ $full = 1 ]; then
    train "$out"
else
    train "$out" --members 1
fi
echo "demo: evaluating on $test"
"$bin" eval --model "$out" "$test" --errors 3
echo
echo "demo: eight reviews the model has not seen, with what a reader would say"
# expected label, then the review (short and long, negated, mixed, not about films)
showcase=$(mktemp)
trap 'rm -f "$showcase"' EXIT
cat > "$showcase" <<'EOF'
positive	A wonderful film, the cast is superb and the story moved me.
negative	Dull, predictable and far too long. I want my two hours back.
positive	Not bad at all!
negative	I did not enjoy a single minute of it.
negative	The effects are impressive, but the script is lazy and the characters are paper thin.
positive	Arrived quickly and works perfectly, great value for the price.
negative	Stopped charging after two weeks and support never replied.
positive	I went in expecting another tired sequel and was happily proven wrong. The first half hour is slow, but once the story finds its feet it never lets go: the performances are honest, the score is beautiful, and the ending earned every tear in the theatre. Easily one of the best films I have seen this year.
EOF
if [ "$out" = models/sample ]; then
    # the sample's 600 reviews know too few words for verdicts worth checking by eye
    cut -f2 "$showcase" | "$bin" predict --model "$out"
else
    cut -f2 "$showcase" | "$bin" predict --model "$out" | paste - "$showcase" |
        awk -F '\t' '{ n += ($1 == $3)
                       text = length($4) > 66 ? substr($4, 1, 63) "..." : $4
                       note = ($1 == $3) ? "" : "   (a reader: " $3 ")"
                       printf "  %-8s %.2f  %-4s  %s%s\n", $1, $2, ($1 == $3) ? "ok" : "MISS", text, note }
                     END { printf "demo: %d of %d as a reader would say", n, NR
                           if (n < NR) printf " (README.md, \"What the demo shows\", says why)"
                           printf "\n" }'
fi
echo
echo "demo: attention of one review"
"$bin" inspect --model "$out" --format html --out "$out/inspect.html" \
    "The acting was brilliant but the plot was a complete mess."
"$bin" inspect --model "$out" --format text \
    "The acting was brilliant but the plot was a complete mess."
echo "demo: done; the model is in $out (training.svg, metrics.jsonl, inspect.html)"
