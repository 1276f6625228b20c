/* attnctl predict: one review per input line in, one verdict per line out,
 * streaming. Lines are read with read(2) into our own buffer; a batch holds
 * the first line plus whatever further lines are already available (a
 * complete line in the buffer, or poll() says the fd has data), so an
 * interactive producer gets each answer as soon as its line is in. Memory is
 * bounded: of a very long line only the first and last `keep` bytes are held. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "attnctl/metrics.h"
#include "cli.h"
#include "infer.h"

#define PREDICT_DEFAULT_BATCH 32
#define READ_CHUNK (64 * 1024)
/* Bytes kept from each end of a long line: at least 64 KiB, and 256 bytes per
 * token of max_len, far more than max_len tokens need under any truncation. */
#define KEEP_MIN (64 * 1024)
#define KEEP_PER_TOKEN 256

static const char PREDICT_USAGE[] =
    "usage: attnctl predict --model DIR [options] [FILE|-]\n"
    "\n"
    "Classifies one review per line of FILE (default: standard input) and prints exactly\n"
    "one line per input line, in order, as soon as it is ready:\n"
    "  LABEL<TAB>PROBABILITY       (probability of the predicted label, 4 decimals)\n"
    "  <empty>                     for a line without a word (empty, white space, markup)\n"
    "With --json, one JSON object per line:\n"
    "  {\"label\":\"positive\",\"probability\":0.97,\"probabilities\":{\"negative\":0.03,\n"
    "   \"positive\":0.97},\"tokens\":57,\"truncated\":false}\n"
    "  {\"label\":null,\"error\":\"empty\"}   for a line without a word\n"
    "\"tokens\" counts the review's tokens before truncation to the model's length (a lower\n"
    "bound for lines over 64 KiB, of which only the head and tail are read); \"truncated\"\n"
    "says whether the model saw less than the whole review.\n"
    "A trailing CR (CRLF input) is removed; a missing final newline is fine; invalid\n"
    "UTF-8 is read as U+FFFD. A gzip-compressed FILE, or standard input redirected from\n"
    "one, is read decompressed; gzip data through a pipe is refused (zcat it into the pipe).\n"
    "\n"
    "options:\n"
    "  --model DIR          model directory (config.json, vocab.txt, model.safetensors)\n"
    "  --json               JSON lines output\n"
    "  --threshold P        binary models: predict the second class when its probability\n"
    "                       is >= P (default: the most probable class)\n"
    "  --batch-size N       at most N lines per forward pass (default 32); results depend\n"
    "                       on it only through float rounding (last printed digit)\n"
    "  --csv                the input is a CSV file with a header: classify its text column\n"
    "                       (one output line per data row; rows with empty text are skipped\n"
    "                       by the CSV reader, as in eval)\n"
    "  --text-column C      with --csv: the text column (default: review, text or sentence)\n"
    "  --threads N          threads to use (default: all cores)\n"
    "  --help               show this help\n";

typedef struct {
    const char *model_dir, *input, *text_column;
    int json, csv, has_threshold;
    double threshold;
    long batch_size, threads;
} predict_options;

static int parse_predict_options(int argc, char **argv, predict_options *o)
{
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'},
        {"json", no_argument, NULL, 'j'},
        {"threshold", required_argument, NULL, 'p'},
        {"batch-size", required_argument, NULL, 'b'},
        {"csv", no_argument, NULL, 'c'},
        {"text-column", required_argument, NULL, 't'},
        {"threads", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->batch_size = PREDICT_DEFAULT_BATCH;
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model_dir = optarg; break;
        case 'j': o->json = 1; break;
        case 'p':
            if (cli_parse_double(optarg, 0.0, 1.0, &o->threshold) != 0)
                return cli_usage_error("predict", "--threshold: '%s' is not a number in [0, 1]",
                                       optarg);
            o->has_threshold = 1;
            break;
        case 'b':
            if (cli_parse_int(optarg, 1, 65536, &o->batch_size) != 0)
                return cli_usage_error("predict",
                                       "--batch-size: '%s' is not an integer in 1..65536", optarg);
            break;
        case 'c': o->csv = 1; break;
        case 't': o->text_column = optarg; break;
        case 'T':
            if (cli_parse_int(optarg, 1, 4096, &o->threads) != 0)
                return cli_usage_error("predict", "--threads: '%s' is not an integer in 1..4096",
                                       optarg);
            break;
        case 'h': fputs(PREDICT_USAGE, stdout); return -1;
        case ':': return cli_usage_error("predict", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("predict", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (argc - optind > 1)
        return cli_usage_error("predict", "at most one input file expected, got %d",
                               argc - optind);
    o->input = optind < argc ? argv[optind] : "-";
    if (!o->model_dir)
        return cli_usage_error("predict", "--model DIR is required");
    if (o->text_column && !o->csv)
        return cli_usage_error("predict", "--text-column only applies with --csv");
    return 0;
}

/* ------------------------------------------------------------- line reader */

typedef struct {
    int fd;
    gzFile gz;          /* a gzip-compressed FILE: read through zlib (NULL: read(2) on fd) */
    const char *gz_error; /* zlib's message when the gzip data was corrupt or cut short */
    int gzip_in_pipe;     /* refused: gzip data arrived through a pipe */
    int started;          /* a byte has been read */
    char *buf;          /* [READ_CHUNK] bytes read, not yet consumed: buf[pos..end) */
    size_t pos, end;
    int eof;
    /* The line being assembled: its first `keep` bytes in head, the last
     * (up to) `keep` bytes after those in the ring buffer tail. */
    size_t keep;
    char *head, *tail, *text; /* text: [2 * keep + 1] the finished line */
    size_t head_len, tail_start, tail_len;
    uint64_t line_bytes;
    int pending;        /* part of a line has been consumed */
    int nonblank;       /* the line has a byte other than white space */
} line_reader;

static int is_gzip_magic(const unsigned char *p) { return p[0] == 0x1f && p[1] == 0x8b; }

/* A file (named, or standard input redirected from it) whose bytes from the
 * current offset start with gzip's magic is read decompressed, as train and
 * eval read theirs. A pipe cannot be peeked at: line_fill refuses gzip data
 * there (it would stream as text, one line of garbage). */
static int is_gzip_file(int fd)
{
    unsigned char magic[2];
    const off_t at = lseek(fd, 0, SEEK_CUR);
    return at >= 0 && pread(fd, magic, 2, at) == 2 && is_gzip_magic(magic);
}

static int line_reader_init(line_reader *r, int fd, size_t keep)
{
    memset(r, 0, sizeof *r);
    r->fd = fd;
    if (is_gzip_file(fd)) {
        int own = dup(fd);
        if (own < 0 || !(r->gz = gzdopen(own, "rb"))) {
            if (own >= 0)
                close(own);
            return -1;
        }
    }
    r->keep = keep;
    r->buf = malloc(READ_CHUNK);
    r->head = malloc(keep);
    r->tail = malloc(keep);
    r->text = malloc(2 * keep + 2);
    return r->buf && r->head && r->tail && r->text ? 0 : -1;
}

static void line_reader_free(line_reader *r)
{
    if (r->gz)
        gzclose(r->gz);
    free(r->buf);
    free(r->head);
    free(r->tail);
    free(r->text);
}

static int is_blank_byte(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static void line_append(line_reader *r, const char *p, size_t n)
{
    r->pending = 1;
    r->line_bytes += n;
    for (size_t i = 0; !r->nonblank && i < n; i++)
        r->nonblank = !is_blank_byte((unsigned char)p[i]);
    if (r->head_len < r->keep) {
        size_t k = n < r->keep - r->head_len ? n : r->keep - r->head_len;
        memcpy(r->head + r->head_len, p, k);
        r->head_len += k;
        p += k;
        n -= k;
    }
    if (n == 0)
        return;
    if (n >= r->keep) {
        memcpy(r->tail, p + n - r->keep, r->keep);
        r->tail_start = 0;
        r->tail_len = r->keep;
        return;
    }
    size_t at = (r->tail_start + r->tail_len) % r->keep;
    size_t first = n < r->keep - at ? n : r->keep - at;
    memcpy(r->tail + at, p, first);
    memcpy(r->tail, p + first, n - first);
    r->tail_len += n;
    if (r->tail_len > r->keep) {
        r->tail_start = (r->tail_start + r->tail_len - r->keep) % r->keep;
        r->tail_len = r->keep;
    }
}

typedef struct {
    const char *text;
    size_t len;
    int blank;
    int cut; /* bytes in the middle were dropped */
} finished_line;

/* Joins head and tail into r->text (a space where bytes were dropped, so the
 * two ends do not glue into one token), strips one trailing CR, and resets
 * the line state. */
static finished_line line_finish(line_reader *r)
{
    finished_line f = {r->text, 0, !r->nonblank, 0};
    size_t n = r->head_len;
    memcpy(r->text, r->head, n);
    if (r->line_bytes > (uint64_t)(r->head_len + r->tail_len)) {
        f.cut = 1;
        r->text[n++] = ' ';
    }
    size_t first = r->tail_len < r->keep - r->tail_start ? r->tail_len : r->keep - r->tail_start;
    memcpy(r->text + n, r->tail + r->tail_start, first);
    memcpy(r->text + n + first, r->tail, r->tail_len - first);
    n += r->tail_len;
    if (n > 0 && r->text[n - 1] == '\r')
        n--;
    r->text[n] = '\0';
    f.len = n;
    r->head_len = r->tail_start = r->tail_len = 0;
    r->line_bytes = 0;
    r->pending = r->nonblank = 0;
    return f;
}

/* Consumes buffered bytes up to the next newline. 1: a line is complete
 * (call line_finish); 0: the buffer is used up without a newline. */
static int line_take(line_reader *r)
{
    if (r->pos == r->end)
        return 0;
    char *start = r->buf + r->pos;
    char *nl = memchr(start, '\n', r->end - r->pos);
    if (!nl) {
        line_append(r, start, r->end - r->pos);
        r->pos = r->end;
        return 0;
    }
    line_append(r, start, (size_t)(nl - start));
    r->pos += (size_t)(nl - start) + 1;
    r->pending = 1; /* an empty line is still a line */
    return 1;
}

/* One read(2) into the (used-up) buffer; blocks. 0 ok (eof set at end of
 * input), -1 read error (errno set). */
static int line_fill(line_reader *r)
{
    for (;;) {
        ssize_t n = r->gz ? gzread(r->gz, r->buf, READ_CHUNK) : read(r->fd, r->buf, READ_CHUNK);
        if (r->gz && n <= 0) {
            int zerr;
            gzerror(r->gz, &zerr);
            if (n < 0 || zerr != Z_OK) {
                if (zerr != Z_ERRNO) {
                    /* "<fd:N>: unexpected end of file": the name is the caller's to give */
                    const char *msg = gzerror(r->gz, &zerr), *colon = strstr(msg, ": ");
                    r->gz_error = strncmp(msg, "<fd:", 4) == 0 && colon ? colon + 2 : msg;
                }
                return -1;
            }
        }
        if (n > 0 && !r->gz && !r->started && n >= 2 && is_gzip_magic((unsigned char *)r->buf)) {
            r->gzip_in_pipe = 1;
            return -1;
        }
        if (n > 0) {
            r->started = 1;
            r->pos = 0;
            r->end = (size_t)n;
            return 0;
        }
        if (n == 0) {
            r->eof = 1;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) { /* non-blocking fd: wait */
            struct pollfd p = {r->fd, POLLIN, 0};
            poll(&p, 1, -1);
            continue;
        }
        return -1;
    }
}

static int input_ready(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    int n;
    do
        n = poll(&p, 1, 0);
    while (n < 0 && errno == EINTR);
    return n > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

/* Next line, waiting for it when `wait`. 1: a line (call line_finish);
 * 0: none available now (or end of input: r->eof && !r->pending);
 * -1: read error. */
static int next_line(line_reader *r, int wait)
{
    for (;;) {
        if (line_take(r))
            return 1;
        if (r->eof)
            return r->pending ? 1 : 0; /* last line without a newline */
        if (!wait && !input_ready(r->fd))
            return 0;
        if (line_fill(r) != 0)
            return -1;
    }
}

/* ----------------------------------------------------------------- output */

typedef struct {
    int empty;
    int length;    /* tokens kept */
    int full_len;  /* tokens before truncation */
    int truncated;
    int batch;     /* the window's batch */
    int model_row; /* row in the model batch */
} slot_info;

static double round6(double x)
{
    return round(x * 1e6) / 1e6;
}

static int choose_class(const predict_options *o, const float *probs, int C)
{
    if (o->has_threshold)
        return probs[1] >= o->threshold ? 1 : 0;
    return ac_argmax(probs, C);
}

/* Writes one result line to stdout; -1 only when out of memory. */
static int write_result(const predict_options *o, const cli_infer *s, const slot_info *slot,
                        const float *probs)
{
    char *const *labels = s->md.config.labels;
    if (slot->empty) {
        fputs(o->json ? "{\"label\":null,\"error\":\"empty\"}\n" : "<empty>\n", stdout);
        return 0;
    }
    int pred = choose_class(o, probs, s->n_classes);
    if (!o->json) {
        printf("%s\t%.4f\n", labels[pred], (double)probs[pred]);
        return 0;
    }
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddStringToObject(obj, "label", labels[pred]);
    cJSON_AddNumberToObject(obj, "probability", round6(probs[pred]));
    cJSON *all = cJSON_AddObjectToObject(obj, "probabilities");
    for (int c = 0; c < s->n_classes; c++)
        cJSON_AddNumberToObject(all, labels[c], round6(probs[c]));
    cJSON_AddNumberToObject(obj, "tokens", slot->full_len);
    cJSON_AddBoolToObject(obj, "truncated", slot->truncated);
    char *text = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!text)
        return -1;
    fputs(text, stdout);
    fputc('\n', stdout);
    free(text);
    return 0;
}

/* 0: written; 1: the reader went away (EPIPE: stop quietly); -1: other error (reported). */
static int flush_output(void)
{
    if (fflush(stdout) == 0 && !ferror(stdout))
        return 0;
    if (errno == EPIPE) {
        /* Drop what is still buffered so that no later flush (main's) reports it. */
        __fpurge(stdout);
        clearerr(stdout);
        return 1;
    }
    cli_error("writing the predictions: %s", strerror(errno));
    return -1;
}

/* ----------------------------------------------------------- line streaming */

/* Runs the model over the non-empty slots (their ids are in slot_ids rows of
 * stride max_len), batch_size consecutive slots a batch, the batches on the
 * window's threads, and writes every slot's line in order. */
static int run_slots(const predict_options *o, cli_infer *s, const int32_t *slot_ids,
                     slot_info *slots, int n_slots, ac_err *err)
{
    const int per_batch = (int)o->batch_size;
    int n_batches = 0;
    for (int first = 0; first < n_slots; first += per_batch) {
        const int end = first + per_batch < n_slots ? first + per_batch : n_slots;
        ac_batch *batch = &s->batches[n_batches].batch;
        int B = 0, T = 1;
        for (int k = first; k < end; k++)
            if (!slots[k].empty && slots[k].length > T)
                T = slots[k].length;
        for (int k = first; k < end; k++) {
            if (slots[k].empty)
                continue;
            int32_t *row = batch->ids + (size_t)B * (size_t)T;
            memcpy(row, slot_ids + (size_t)k * (size_t)s->max_len,
                   (size_t)slots[k].length * sizeof *row);
            for (int t = slots[k].length; t < T; t++)
                row[t] = AC_PAD_ID;
            batch->lengths[B] = slots[k].length;
            slots[k].batch = n_batches;
            slots[k].model_row = B++;
        }
        batch->B = B;
        batch->T = T;
        if (B > 0)
            n_batches++;
    }
    if (cli_infer_run_window(s, n_batches, 0, err) != 0)
        return -1;
    for (int k = 0; k < n_slots; k++) {
        const float *probs = slots[k].empty ? NULL
                                            : s->batches[slots[k].batch].probs +
                                                  (size_t)slots[k].model_row * (size_t)s->n_classes;
        if (write_result(o, s, &slots[k], probs) != 0)
            return ac_err_set(err, "out of memory while writing JSON");
    }
    return 0;
}

static int predict_lines(const predict_options *o, cli_infer *s, int fd)
{
    int rc = CLI_EXIT_RUNTIME;
    ac_err err = {{0}};
    size_t keep = (size_t)s->max_len * KEEP_PER_TOKEN;
    if (keep < KEEP_MIN)
        keep = KEEP_MIN;
    line_reader r;
    /* A round reads up to a window of batches: the first line waits, the
     * others only join when they are already in (a batch breaks where it
     * would have one at a time, so the batches do not depend on the threads). */
    const int max_slots = s->window * (int)o->batch_size;
    int32_t *slot_ids = malloc((size_t)max_slots * (size_t)s->max_len * sizeof *slot_ids);
    slot_info *slots = calloc((size_t)max_slots, sizeof *slots);
    if (line_reader_init(&r, fd, keep) != 0 || !slot_ids || !slots) {
        cli_error("out of memory for the input buffers");
        goto done;
    }
    const char *name = strcmp(o->input, "-") == 0 ? "standard input" : o->input;
    for (;;) {
        int n = 0;
        while (n < max_slots) {
            int got = next_line(&r, n == 0);
            if (got < 0) {
                if (r.gzip_in_pipe)
                    cli_error("reading %s: it is gzip-compressed data; decompress it into the pipe "
                              "(zcat FILE | attnctl predict ...) or name the file",
                              name);
                else if (r.gz_error)
                    cli_error("reading %s: the gzip data is corrupt or cut short (zlib: %s)", name,
                              r.gz_error);
                else
                    cli_error("reading %s: %s", name, strerror(errno));
                goto done;
            }
            if (got == 0)
                break;
            finished_line line = line_finish(&r);
            slot_info *slot = &slots[n];
            memset(slot, 0, sizeof *slot);
            slot->empty = line.blank;
            if (!slot->empty) {
                int full_len = 0;
                int len = ac_encode_text(s->tok, &s->md.config.tokenizer, &s->md.vocab, line.text,
                                         line.len, s->max_len,
                                         slot_ids + (size_t)n * (size_t)s->max_len, &full_len);
                if (len < 1) {
                    cli_error("out of memory while tokenizing a line of %s", name);
                    goto done;
                }
                slot->length = len;
                slot->full_len = full_len;
                slot->truncated = line.cut || full_len > len;
                /* One <unk>: an unknown word, or no token at all (no-break
                 * spaces, a lone tag), which is a blank line to the model. */
                const int32_t *ids = slot_ids + (size_t)n * (size_t)s->max_len;
                const ac_token *toks;
                if (len == 1 + (s->md.vocab.with_cls ? 1 : 0) && ids[len - 1] == AC_UNK_ID &&
                    ac_tokenize(s->tok, line.text, line.len, &toks) == 0)
                    slot->empty = 1;
            }
            n++;
        }
        if (n == 0)
            break; /* end of input */
        if (run_slots(o, s, slot_ids, slots, n, &err) != 0) {
            cli_error("%s", err.msg);
            goto done;
        }
        int f = flush_output();
        if (f != 0) {
            rc = f > 0 ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
            goto done;
        }
    }
    rc = CLI_EXIT_OK;
done:
    line_reader_free(&r);
    free(slot_ids);
    free(slots);
    return rc;
}

/* ---------------------------------------------------------------- CSV input */

typedef struct {
    const predict_options *o;
    const ac_corpus *corpus;
    int rc; /* when the output stops the run: the exit status */
} csv_output;

/* One batch's lines, in its rows' order (cli_infer_batch_fn). */
static int write_csv_batch(void *user, const cli_infer *s, const cli_infer_batch *b)
{
    csv_output *out = user;
    const ac_batch *batch = &b->batch;
    for (int i = 0; i < batch->B; i++) {
        int64_t row = batch->rows[i];
        slot_info slot = {.length = batch->lengths[i], .full_len = out->corpus->full_len[row]};
        slot.truncated = slot.full_len > slot.length;
        if (write_result(out->o, s, &slot, b->probs + (size_t)i * (size_t)s->n_classes) != 0) {
            cli_error("out of memory while writing JSON");
            out->rc = CLI_EXIT_RUNTIME;
            return 1;
        }
    }
    int f = flush_output();
    if (f != 0) {
        out->rc = f > 0 ? CLI_EXIT_OK : CLI_EXIT_RUNTIME;
        return 1;
    }
    return 0;
}

static int predict_csv(const predict_options *o, cli_infer *s)
{
    ac_err err = {{0}};
    ac_rawdata raw;
    ac_corpus corpus;
    ac_batch_plan plan;
    memset(&raw, 0, sizeof raw);
    memset(&corpus, 0, sizeof corpus);
    memset(&plan, 0, sizeof plan);
    int rc = CLI_EXIT_RUNTIME;
    const char *path = strcmp(o->input, "-") == 0 ? "/dev/stdin" : o->input;
    if (cli_infer_read_csv(s, path, o->text_column, NULL, 0, &raw, &corpus, &plan, &err) != 0) {
        cli_error("%s", err.msg);
        goto done;
    }
    if (raw.n_rows == 0) {
        rc = CLI_EXIT_OK;
        goto done;
    }
    csv_output out = {o, &corpus, CLI_EXIT_OK};
    int run = cli_infer_run_plan(s, &corpus, &plan, 0, write_csv_batch, &out, &err);
    if (run < 0) {
        cli_error("%s", err.msg);
        goto done;
    }
    if (run > 0) {
        rc = out.rc;
        goto done;
    }
    rc = CLI_EXIT_OK;
done:
    ac_batch_plan_free(&plan);
    ac_corpus_free(&corpus);
    ac_rawdata_free(&raw);
    return rc;
}

int cmd_predict(int argc, char **argv)
{
    predict_options o;
    int rc = parse_predict_options(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? CLI_EXIT_OK : rc;
    /* A reader that goes away (| head -1) shows up as EPIPE on write: we then stop quietly. */
    signal(SIGPIPE, SIG_IGN);
    cli_set_threads((int)o.threads);

    int fd = STDIN_FILENO;
    if (!o.csv && strcmp(o.input, "-") != 0) {
        fd = open(o.input, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return cli_error("%s: %s", o.input, strerror(errno));
    }
    ac_err err = {{0}};
    cli_infer s;
    if (cli_infer_open(&s, o.model_dir, (int)o.batch_size, &err) != 0) {
        if (fd != STDIN_FILENO)
            close(fd);
        return cli_error("%s", err.msg);
    }
    if (o.has_threshold && s.n_classes != 2) {
        rc = cli_error("--threshold needs a binary model; %s has %d classes", o.model_dir,
                       s.n_classes);
    } else {
        rc = o.csv ? predict_csv(&o, &s) : predict_lines(&o, &s, fd);
    }
    cli_infer_close(&s);
    if (fd != STDIN_FILENO)
        close(fd);
    return rc;
}
