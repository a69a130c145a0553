/* cli.h — the kestrel subcommands (argument parsing only; the work is in the
 * layers below). Each returns the process exit status. */
#ifndef KS_CLI_H
#define KS_CLI_H

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
