#include <stdio.h>

int main(void)
{
    fprintf(stderr, "weft_info: not implemented yet\n");
    return 2;
}
