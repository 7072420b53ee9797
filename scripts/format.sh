#!/usr/bin/env bash
# Format every C++ source in the tree with the repository's .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | xargs -r clang-format -i
