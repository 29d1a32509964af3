// ciuic-info's program as a function: the tool and the Python package
// (python -m ciuic.info) print the same.
#ifndef CIUIC_TOOLS_INFO_MAIN_H_
#define CIUIC_TOOLS_INFO_MAIN_H_

namespace ciuic::tools {
// argv[0] is the program name; returns the exit status (0, 2 on bad usage
// or a bad knob). Writes to stdout/stderr.
int InfoMain(int argc, char** argv);
}  // namespace ciuic::tools

#endif  // CIUIC_TOOLS_INFO_MAIN_H_
