#include <stdio.h>

#include "cli.h"

int cmd_inspect(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("inspect: not implemented yet");
}
