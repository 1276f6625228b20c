/* attnctl pretrain: masked-LM pretraining of the encoder on unlabelled text.
 * The options, the run and the command itself are train's
 * (src/cli/train_options.c and src/cli/train.c, the objective as a
 * parameter); this file holds what only pretrain says, its help. */
#include <stdio.h>

#include "cli.h"

void cli_pretrain_help(void)
{
    printf("usage: attnctl pretrain [OPTIONS] TEXT.csv[.gz]|TEXT.txt[.gz]... --out DIR\n"
           "       attnctl pretrain --resume DIR [--max-steps N] [--threads N] [--keep-checkpoint] [--quiet]\n"
           "\n"
           "Trains the encoder as a masked language model (BERT) on unlabelled text: in each\n"
           "text 15%% of the tokens are predicted from the rest, their input replaced by\n"
           "<mask> (80%%), a random word (10%%) or left as it was (10%%); the output layer is\n"
           "the token embedding (tied) plus a bias, and only the masked positions get logits.\n"
           "The vocabulary (with <mask>) is built from all the text. DIR receives the\n"
           "pretrained model (config.json with model.objective \"masked_lm\", vocab.txt,\n"
           "model.safetensors), metrics.jsonl and training.svg (held-out masked-token loss\n"
           "and accuracy) and checkpoint/. Fine-tune it with: attnctl train --init DIR ...\n"
           "\n"
           "Text files: a file named *.csv, *.tsv or either with .gz is a CSV whose text column\n"
           "is found by name (review/text/sentence; labels are ignored); any other file is plain\n"
           "text, one document a line (blank lines skipped). gzip is recognised by content. Never\n"
           "pretrain on the texts you will test on.\n"
           "\n");
    cli_print_options(CLI_PRETRAIN);
}
