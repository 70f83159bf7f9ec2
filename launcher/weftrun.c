#include <stdio.h>

int main(void)
{
    fprintf(stderr, "weftrun: not implemented yet\n");
    return 2;
}
