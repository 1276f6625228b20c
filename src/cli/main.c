#include <stdio.h>
#include <string.h>

#include "attnctl/io.h"
#include "cli.h"

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("attnctl %s\n", AC_VERSION);
        return 0;
    }
    fprintf(stderr, "usage: attnctl COMMAND [OPTIONS]\n");
    return CLI_EXIT_USAGE;
}
