// placeholder, being written
#include "cuda/context.h"
