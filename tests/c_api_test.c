/* C API test: being written. */
#include "infer/infer.h"
int main(void) { return 77; }
