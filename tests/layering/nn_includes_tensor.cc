// Compiled with nn/'s include view by the layering test: must succeed, nn/ sits on tensor/.
#include "dtrain/tensor/tensor.h"
int main() { return 0; }
