#!/bin/sh
# Builds tests/fuzz/seeds/<target>/ from the vectors (idempotent).
cd "$(dirname "$0")/../.." || exit 2
V=tests/vectors
s=tests/fuzz/seeds
mkdir -p $s/fuzz_frame $s/fuzz_header $s/fuzz_lobs $s/fuzz_fobs $s/fuzz_splice $s/fuzz_items
# fuzz_frame reads its first byte as the piece size: prefix each frame with a few sizes.
for f in $V/frames/*.bin; do
    b=$(basename "$f" .bin)
    for k in 001 006 021 377; do { printf "\\$k"; cat "$f"; } > $s/fuzz_frame/$b-$k.bin; done
done
cp $V/frames/cap*.bin $s/fuzz_header/ 2>/dev/null
for f in $V/[0-9]*.bin; do cp "$f" $s/fuzz_lobs/; cp "$f" $s/fuzz_fobs/; cp "$f" $s/fuzz_splice/; done
for f in $V/11_*.npz $V/4[0-3]_*; do case $f in *.txt) ;; *) cp "$f" $s/fuzz_items/;; esac; done
mkdir -p $s/fuzz_mpdump; cp $V/[0-9]*.bin $s/fuzz_mpdump/
mkdir -p $s/fuzz_stream_rx; cp tests/fuzz/corpus/fuzz_stream_rx/* $s/fuzz_stream_rx/
mkdir -p $s/fuzz_capi $s/fuzz_dlmsg
cp $V/2[0-8]_*.bin $V/07_*.bin $V/09_*.bin $V/12_*.bin $s/fuzz_capi/
cp $V/3[0-7]_*.bin $s/fuzz_dlmsg/
mkdir -p $s/fuzz_dxo; cp $V/0[2347]_*.bin $V/1[23]_*.bin $s/fuzz_dxo/
mkdir -p $s/fuzz_config; cp conf/cjrelay.ini $s/fuzz_config/
exit 0
