#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
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
# fuzz_itemcheck: byte 0 = flags (bit 0: safetensors; bit 1: item longer than given;
# bits 4-7: index), bytes 1-2 = a cut, then the item.
mkdir -p $s/fuzz_itemcheck
for f in $V/11_*.npz $V/40_*.npz; do { printf '\000\000\100'; cat "$f"; } > $s/fuzz_itemcheck/$(basename "$f"); done
for f in $V/41_*.npz; do { printf '\020\000\100'; cat "$f"; } > $s/fuzz_itemcheck/$(basename "$f"); done
for f in $V/4[23]_*.safetensors; do
    { printf '\001\000\020'; cat "$f"; } > $s/fuzz_itemcheck/$(basename "$f")
    { printf '\003\000\010'; head -c 200 "$f"; } > $s/fuzz_itemcheck/part-$(basename "$f")
done
mkdir -p $s/fuzz_mpdump; cp $V/[0-9]*.bin $s/fuzz_mpdump/
mkdir -p $s/fuzz_stream_rx; cp tests/fuzz/corpus/fuzz_stream_rx/* $s/fuzz_stream_rx/
mkdir -p $s/fuzz_capi $s/fuzz_dlmsg
cp $V/2[0-8]_*.bin $V/07_*.bin $V/09_*.bin $V/12_*.bin $s/fuzz_capi/
cp $V/3[0-7]_*.bin $s/fuzz_dlmsg/
mkdir -p $s/fuzz_pipemsg; cp $V/pipe/*.bin $s/fuzz_pipemsg/
mkdir -p $s/fuzz_dxo; cp $V/0[2347]_*.bin $V/1[23]_*.bin $s/fuzz_dxo/
mkdir -p $s/fuzz_config; cp conf/cjrelay.ini $s/fuzz_config/
printf '# launch tokens\n  tok-aaaaaaaaaaaaaaaaaaaa \n\ntok-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n' > $s/fuzz_config/tokens.txt
# fuzz_router: byte 0 = flags (bit 0: prepend trainer_1's HELLO; bit 1: framed
# records; bits 2-4: write piece size), then the worker's byte stream.
mkdir -p $s/fuzz_router
for f in $V/frames/cap*.bin; do
    b=$(basename "$f" .bin)
    { printf '\035'; cat "$f"; } > $s/fuzz_router/raw-$b.bin          # HELLO + frame, one piece
    { printf '\015'; cat "$f" "$f"; } > $s/fuzz_router/raw17-$b.bin   # twice, 17-byte pieces
done
{ printf '\034'; cat $V/frames/cap17_hello_trainer.bin $V/frames/cap25_*.bin $V/frames/cap75_ping.bin \
    $V/frames/cap67_*.bin $V/frames/cap73_bye_req.bin; } > $s/fuzz_router/raw-session.bin
# framed records [kind][hlen:2][plen:2][header][payload] cut from the DATA frames
if command -v python3 >/dev/null; then
    python3 - "$V/frames" $s/fuzz_router <<'PY'
import os, sys, glob
src, dst = sys.argv[1], sys.argv[2]
recs = []
for f in sorted(glob.glob(os.path.join(src, 'cap*.bin'))):
    b = open(f, 'rb').read()
    if len(b) < 16 or b[6] != 1:
        continue
    hl = b[4] << 8 | b[5]
    h, p = b[16:16 + hl], b[16 + hl:]
    rec = bytes([0]) + len(h).to_bytes(2, 'big') + len(p).to_bytes(2, 'big') + h + p
    recs.append(rec)
    open(os.path.join(dst, 'framed-' + os.path.basename(f)), 'wb').write(b'\x1f' + rec + b'\x02\0\0\0\0')
open(os.path.join(dst, 'framed-all.bin'), 'wb').write(b'\x1f' + b''.join(recs))
PY
fi
# fuzz_status: byte 0 = flags (bit 0: admin; bit 1: the command fails; bit 2: no
# command callback; bit 3: no show callback), then command lines.
mkdir -p $s/fuzz_status
printf '\001help\nshow info\nshow stats json\nshow workers\npause\nresume\nreload\nshutdown now\n' > $s/fuzz_status/admin.txt
printf '\000show config json\nshutdown\nshow\nshow info json extra\n\n \t\r\nbogus\n' > $s/fuzz_status/readonly.txt
printf '\003shutdown now\npause 1\nshutdown later\nreload\n' > $s/fuzz_status/failing.txt
printf '\005reload\n\014show metrics\na b c d e f g h i\n' > $s/fuzz_status/nocallbacks.txt
# fuzz_dlreply: bytes 0-1 set the piece sizes, then a whole download reply payload.
mkdir -p $s/fuzz_dlreply
for f in $V/3[137]_*.bin; do { printf '\003\001'; cat "$f"; } > $s/fuzz_dlreply/$(basename "$f"); done
# fuzz_refmap: whole payloads with DOT-3/6 datums to rewrite.
mkdir -p $s/fuzz_refmap; cp $V/[0-9]*.bin $s/fuzz_refmap/
# fuzz_ws: byte 0 = flags (bit 0: server; bits 1-7: piece size - 1), byte 1 bit 0 set:
# no 101 prepended for a client; then what the peer sends (the http capture's starts).
mkdir -p $s/fuzz_ws
{ printf '\016\001'; head -c 6000 $V/transports/http/s2c.bin; } > $s/fuzz_ws/s2c-client
{ printf '\017\000'; head -c 6000 $V/transports/http/c2s.bin; } > $s/fuzz_ws/c2s-server
{ printf '\000\000'; tail -c 2000 $V/transports/http/s2c.bin; } > $s/fuzz_ws/s2c-tail-client
# every length form (7, 16, 64 bits: the last message's start only, to keep the input short), a
# message in fragments with a PING between them
{ printf '\006\000\202\010\000\000\000\010abcd\202\176\000\200\000\000\000\200'; head -c 124 /dev/zero
  printf '\002\002\000\000\211\001p\000\003\000\012\001\200\005xxxxx'
  printf '\202\177\000\000\000\000\000\001\000\000\000\001\000\000'; head -c 200 /dev/zero; } > $s/fuzz_ws/forms-client
# fuzz_grpc: byte 0 = flags (bit 0: server; bit 1: message reader alone; bits 2-7: piece
# size / 4 + 1), then what the peer sends (the grpc capture's starts).
mkdir -p $s/fuzz_grpc
{ printf '\010'; head -c 8000 $V/transports/grpc/s2c.bin; } > $s/fuzz_grpc/s2c-client
{ printf '\011'; head -c 8000 $V/transports/grpc/c2s.bin; } > $s/fuzz_grpc/c2s-server
{ printf '\002'; cat $V/transports/grpc/frames/client-000.bin; } > $s/fuzz_grpc/frame-reader
# fuzz_jobdesc: job descriptions, a full one, the minimal one and a few refused.
mkdir -p $s/fuzz_jobdesc
printf '{"job_id": "J1"}' > $s/fuzz_jobdesc/minimal.json
cat > $s/fuzz_jobdesc/full.json <<'JSON'
{"job_id": "3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f", "site": "site-1", "server_url": "grpcs://fl.example.org:8002",
 "connection_security": "mtls", "ca_file": "/kit/rootCA.pem", "cert_file": "/kit/client.crt", "key_file": "/kit/client.key",
 "project_name": "proj", "parent_url": "tcp://localhost:8004",
 "credentials": {"token": "tok-secret", "token_signature": "c2ln", "ssid": "s1"}, "mode": "spool", "workspace": "/ws",
 "worker": {"argv": ["python3", "-u", "it's \"x\"", ""], "cwd": "/ws/app", "env": {"A": "1\n", "B_2": "x y"},
  "user": "flare", "group": "1000", "count": 3, "listen": "unix:/run/cjrelay/j1.sock, tcp://127.0.0.1:9000"},
 "bootstrap": {"task_exchange": {"train_with_eval": true, "exchange_format": "pytorch"}, "memory_gc_rounds": 2,
  "cuda_empty_cache": true, "extra": [1, {"a": null}, "\u00e9\ud83d\ude00"]}}
JSON
printf '{"job_id": "J1", "server_url": "https://h:443", "connection_security": "tls", "ca_file": "/ca"}' > $s/fuzz_jobdesc/tls.json
printf '{"job_id": "J1", "server_url": "grpcs://h:1", "colour": 1}' > $s/fuzz_jobdesc/refused.json
exit 0
