#include <stdio.h>

#include "cli.h"

int cmd_predict(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("predict: not implemented yet");
}
