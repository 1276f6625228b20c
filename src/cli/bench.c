#include <stdio.h>

#include "cli.h"

int cmd_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("bench: not implemented yet");
}
