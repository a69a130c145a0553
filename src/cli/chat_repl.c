/* chat_repl.c — `kestrel run MODEL` without -p: an interactive chat in the
 * terminal. Reads one user message per line from standard input (a trailing
 * backslash continues it on the next line), renders the whole conversation
 * with the model's chat template (add_generation_prompt), tokenizes it without
 * added special tokens (the template writes them), generates with the engine
 * and streams the reply to stdout; reasoning (<think>...</think>) is dimmed on
 * a terminal and bracketed by <think> / </think> otherwise, and only the
 * reply's content goes back into the conversation. Commands: /exit (or EOF),
 * /clear (keeps the system message), /system TEXT (empty: none), /help.
 * Speed per reply goes to stderr.
 *
 * With stdin not a terminal nothing but the replies (each followed by one
 * newline) is written to stdout, so piped conversations are scriptable. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/strbuf.h"
#include "chat/output_parser.h"
#include "cli/cli.h"

static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
}

typedef struct {
    strbuf content;     /* the reply's content (what goes back into the conversation) */
    bool dim;           /* stdout is a terminal: reasoning in ANSI dim */
    bool in_reasoning;  /* a reasoning span is open on stdout */
    bool wrote;         /* anything written for this reply */
} reply_ctx;

static void close_reasoning(reply_ctx *c) {
    if (!c->in_reasoning) return;
    fputs(c->dim ? "\033[0m\n" : "</think>\n", stdout);
    c->in_reasoning = false;
}

static void on_piece(void *ud, const out_piece *pc) {
    reply_ctx *c = ud;
    if (pc->kind == OUT_REASONING) {
        if (!c->in_reasoning) fputs(c->dim ? "\033[2m" : "<think>", stdout);
        c->in_reasoning = true;
        fwrite(pc->text, 1, pc->len, stdout);
    } else if (pc->kind == OUT_CONTENT) {
        close_reasoning(c);
        fwrite(pc->text, 1, pc->len, stdout);
        sb_append(&c->content, pc->text, pc->len);
    } else {
        return; /* tools are never offered here */
    }
    c->wrote = true;
    fflush(stdout);
}

/* Reads one user input (continuation lines joined with '\n'). Returns 1 with
 * the text in *out, 0 at EOF / interrupt with nothing pending. */
static int read_input(bool tty, strbuf *out) {
    sb_clear(out);
    char *line = NULL;
    size_t cap = 0;
    int got = 0;
    for (;;) {
        if (tty) {
            fputs(got ? ". " : "> ", stdout);
            fflush(stdout);
        }
        errno = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) break; /* EOF, error or Ctrl-C: hand back what is pending */
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        got = 1;
        if (n > 0 && line[n - 1] == '\\') {
            sb_append(out, line, (size_t)n - 1);
            sb_append(out, "\n", 1);
            continue;
        }
        sb_append(out, line, (size_t)n);
        break;
    }
    free(line);
    if (!got && tty) fputc('\n', stdout);
    return got;
}

static bool blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return false;
    return true;
}

/* Sets (or, with an empty text, removes) the leading system message. */
static void set_system(json_t *msgs, const char *text) {
    json_t *first = json_array_get(msgs, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    bool has = role && !strcmp(role, "system");
    if (!*text) {
        if (has) json_array_remove(msgs, 0);
        return;
    }
    json_t *m = json_pack("{s:s, s:s}", "role", "system", "content", text);
    if (has) json_array_set_new(msgs, 0, m);
    else json_array_insert_new(msgs, 0, m);
}

/* Generates one reply for the rendered prompt ids. Returns 0, or -1 with
 * err_msg() set when the engine failed. *content receives the reply's content. */
static int generate_reply(const chat_repl_config *cfg, const int32_t *ids, int n_ids, bool in_think, strbuf *content) {
    output_parser_config opc = {false, cfg->think, in_think};
    output_parser *op = output_parser_new(&opc);
    if (!op) return err_set(KS_ENOMEM, "out of memory");
    reply_ctx c = {.dim = isatty(STDOUT_FILENO)};
    int rc = 0;
    engine_req *req = engine_submit(cfg->eng, ids, n_ids, cfg->params);
    if (!req) {
        rc = -1;
        goto done;
    }
    g_interrupted = 0;
    bool cancelled = false;
    engine_event ev;
    for (;;) {
        if (g_interrupted && !cancelled) {
            engine_cancel(req);
            cancelled = true;
        }
        if (!engine_next_event(req, &ev, 100)) continue;
        if (ev.type == ENGINE_EV_ERROR) {
            err_set(KS_EINVAL, "%s", ev.text ? ev.text : "generation failed");
            engine_event_clear(&ev);
            rc = -1;
            break;
        }
        if (ev.len) output_parser_feed(op, ev.text, ev.len, on_piece, &c);
        if (ev.type == ENGINE_EV_DONE) {
            output_parser_finish(op, on_piece, &c);
            close_reasoning(&c);
            fputc('\n', stdout);
            fflush(stdout);
            if (ev.finish == ENGINE_FINISH_CANCELLED) fprintf(stderr, "[stopped]\n");
            if (ev.finish == ENGINE_FINISH_CONTEXT)
                fprintf(stderr, "kestrel: the context (%d tokens) is full; /clear starts a new conversation\n",
                        cfg->ctx_size);
            double tp = ev.t_first_token, td = ev.t_total - ev.t_first_token;
            fprintf(stderr, "kestrel: prompt %d tokens, %.1f tok/s; decode %d tokens, %.1f tok/s (%s)\n", ev.n_prompt,
                    tp > 0 ? ev.n_prompt / tp : 0.0, ev.n_gen, ev.n_gen > 1 && td > 0 ? (ev.n_gen - 1) / td : 0.0,
                    cfg->hw ? cfg->hw : "");
            engine_event_clear(&ev);
            break;
        }
        engine_event_clear(&ev);
    }
    sb_append(content, c.content.s ? c.content.s : "", c.content.len);
done:
    engine_req_release(req);
    output_parser_free(op);
    sb_free(&c.content);
    return rc;
}

/* Does the rendered prompt end inside an opened <think> (a template that
 * forces thinking)? */
static bool ends_in_think(const char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) n--;
    return n >= 7 && !memcmp(s + n - 7, "<think>", 7);
}

int chat_repl(const chat_repl_config *cfg) {
    bool tty = isatty(STDIN_FILENO);
    json_t *msgs = json_array();
    strbuf in = {0}, reply = {0};
    int status = 0;
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt ends getline */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    if (!msgs) { fprintf(stderr, "kestrel: out of memory\n"); status = 1; goto done; }
    if (tty)
        fprintf(stderr, "kestrel chat: /exit or Ctrl-D quits, /clear starts over, /system TEXT sets the system "
                        "message, a trailing \\ continues the line, Ctrl-C stops a reply.\n");
    for (;;) {
        g_interrupted = 0;
        if (!read_input(tty, &in)) break;
        const char *text = in.s ? in.s : "";
        if (text[0] == '/') {
            if (!strcmp(text, "/exit") || !strcmp(text, "/quit") || !strcmp(text, "/bye")) break;
            if (!strcmp(text, "/clear")) { /* keeps the system message */
                json_t *first = json_array_get(msgs, 0);
                const char *role = json_string_value(json_object_get(first, "role"));
                while (json_array_size(msgs) > (role && !strcmp(role, "system") ? 1u : 0u))
                    json_array_remove(msgs, json_array_size(msgs) - 1);
                if (tty) fprintf(stderr, "(conversation cleared)\n");
                continue;
            }
            if (!strncmp(text, "/system", 7) && (text[7] == 0 || text[7] == ' ' || text[7] == '\n')) {
                const char *t = text + 7;
                while (*t == ' ' || *t == '\n') t++;
                set_system(msgs, t);
                if (tty) fprintf(stderr, *t ? "(system message set)\n" : "(system message removed)\n");
                continue;
            }
            if (!strcmp(text, "/help")) {
                fprintf(stderr, "/exit  /clear  /system TEXT  /help; end a line with \\ to continue it\n");
                continue;
            }
            fprintf(stderr, "kestrel: unknown command '%s' (/help lists them)\n", text);
            continue;
        }
        if (blank(text)) continue;
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", text));
        char *prompt = NULL;
        int32_t *ids = NULL;
        int n_ids = 0;
        if (chat_template_apply(cfg->tmpl, msgs, NULL, true, NULL, &prompt) != 0 ||
            tok_encode(cfg->tok, prompt, strlen(prompt), false, &ids, &n_ids) != 0) {
            fprintf(stderr, "kestrel: %s\n", err_msg());
            json_array_remove(msgs, json_array_size(msgs) - 1);
            free(prompt);
            free(ids);
            continue;
        }
        if (n_ids >= cfg->ctx_size) {
            fprintf(stderr,
                    "kestrel: the conversation is %d tokens, the context holds %d (--ctx-size); "
                    "/clear starts a new one\n",
                    n_ids, cfg->ctx_size);
            json_array_remove(msgs, json_array_size(msgs) - 1);
            free(prompt);
            free(ids);
            continue;
        }
        sb_clear(&reply);
        int rc = generate_reply(cfg, ids, n_ids, cfg->think && ends_in_think(prompt), &reply);
        free(prompt);
        free(ids);
        if (rc) {
            fprintf(stderr, "kestrel: %s\n", err_msg());
            json_array_remove(msgs, json_array_size(msgs) - 1);
            continue;
        }
        json_array_append_new(msgs, json_pack("{s:s, s:s%}", "role", "assistant", "content", reply.s ? reply.s : "",
                                              reply.len));
    }
done:
    sigaction(SIGINT, &old_sa, NULL);
    json_decref(msgs);
    sb_free(&in);
    sb_free(&reply);
    return status;
}
