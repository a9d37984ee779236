#!/bin/sh
# Builds tests/fuzz/seeds/<target>/ from the vectors (idempotent).
cd "$(dirname "$0")/../.." || exit 2
V=tests/vectors
s=tests/fuzz/seeds
mkdir -p $s/fuzz_frame $s/fuzz_header $s/fuzz_lobs $s/fuzz_fobs $s/fuzz_splice
cp $V/frames/*.bin $s/fuzz_frame/ 2>/dev/null
cp $V/frames/cap*.bin $s/fuzz_header/ 2>/dev/null
for f in $V/[0-9]*.bin; do cp "$f" $s/fuzz_lobs/; cp "$f" $s/fuzz_fobs/; cp "$f" $s/fuzz_splice/; done
exit 0
