// mlakit: the command-line program: info, bench, bench-op, check, tune.
#include "commands.h"

int main(int argc, char** argv) { return mlakit::tools::run_program(argc, argv); }
