#!/bin/sh
# The main job, end to end: train, evaluate, predict, inspect.
# On the IMDB data (../shared/data/imdb) when it is there, else on the small
# sample written for this project (data/sample_*.csv). Says which.
# usage: sh data/demo.sh [ATTNCTL]   (make demo passes build/attnctl)
set -eu
bin=${1:-./attnctl}
imdb=../shared/data/imdb
if [ -f "$imdb/train.csv.gz" ] && [ -f "$imdb/test.csv.gz" ]; then
    echo "demo: training on IMDB ($imdb/train.csv.gz, 25,000 reviews) with models/default.json"
    train=$imdb/train.csv.gz; test=$imdb/test.csv.gz; out=models/imdb; config=models/default.json
    extra=""
else
    echo "demo: $imdb not found; training on the project's small sample (data/sample_train.csv)"
    train=data/sample_train.csv; test=data/sample_test.csv; out=models/sample; config=models/seed.json
    # 600 short reviews: more epochs and a larger step than IMDB needs
    extra="--epochs 15 --lr 0.005"
fi
if [ -f "$out/model.safetensors" ]; then
    echo "demo: $out already holds a model; using it (rm -r $out to train again)"
else
    rm -rf "$out"
    # shellcheck disable=SC2086
    "$bin" train --config "$config" $extra "$train" --out "$out"
fi
echo "demo: evaluating on $test"
"$bin" eval --model "$out" "$test" --errors 3
echo "demo: predicting three reviews"
printf '%s\n' "A wonderful film, the cast is superb and the story moved me." \
              "Dull, predictable and far too long. I want my two hours back." \
              "Not bad at all!" | "$bin" predict --model "$out"
echo "demo: attention of one review"
"$bin" inspect --model "$out" --format html --out "$out/inspect.html" \
    "The acting was brilliant but the plot was a complete mess."
"$bin" inspect --model "$out" --format text \
    "The acting was brilliant but the plot was a complete mess."
echo "demo: done; the model is in $out (training.svg, metrics.jsonl, inspect.html)"
