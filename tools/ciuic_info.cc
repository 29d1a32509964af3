// ciuic-info: version, build options, SIMD targets, caches and every knob
// (tools/info_main.cc).
#include "tools/info_main.h"

int main(int argc, char** argv) { return ciuic::tools::InfoMain(argc, argv); }
