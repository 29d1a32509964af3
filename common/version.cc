// Anchor translation unit of libciuic.so (the layers come in as whole
// archives); the build identity itself is generated into build_info.cc.
#include "common/version.h"
