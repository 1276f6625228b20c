#!/bin/sh
# The main job, end to end: train, evaluate, predict, inspect.
# On the IMDB data (../shared/data/imdb) when it is there, else on the small
# sample written for this project (data/sample_*.csv). Says which. With IMDB's
# unlabelled reviews too, the model is a self-trained student (about 9 to 13
# minutes in all on 2 cores instead of 4 to 7).
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
# train DIR [OPTIONS...]: the preset on $train into DIR, unless DIR holds a model
train() {
    dir=$1
    shift
    if [ -f "$dir/model.safetensors" ]; then
        echo "demo: $dir already holds a model; using it (rm -r $dir to train again)"
        return
    fi
    rm -rf "$dir"
    # shellcheck disable=SC2086
    "$bin" train --config "$config" $extra "$train" --out "$dir" "$@"
}
if [ "$config" = models/default.json ] && [ -f "$imdb/unsup.csv.gz" ]; then
    # Self-training: a first model labels the 50,000 unlabelled reviews and the
    # ones it is sure of join the training rows of a second (README, "Self-training").
    echo "demo: first the teacher (models/imdb-teacher), then a student that also reads the"
    echo "demo: unlabelled reviews the teacher is sure of ($imdb/unsup.csv.gz)"
    train models/imdb-teacher
    # The teacher is the default, the mean of 3 members; the student is one model
    # (--members 1): its 57,000 rows already smooth what the members would.
    echo "demo: the student"
    train "$out" --teacher models/imdb-teacher --unlabelled "$imdb/unsup.csv.gz" --members 1
else
    train "$out"
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
