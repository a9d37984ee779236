# SPDX-License-Identifier: Apache-2.0
# mkseeds_stream.py — wrote the crafted records in corpus/fuzz_stream_rx (layout: fuzz_stream_rx.c header comment).
# Kept for regenerating them; the records themselves are committed, so a build needs no Python.
import os, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
def chunk(sq, length, origin=0, idx=0, neg=0, chtp=0, dt=0, rs=0, ri=0, cw=0, szi=4, pe_ok=1, op=0, ai1k=0, rw0=0, osmode=0, omit_sz=0, omit_os=0, fill=None):
    b1 = origin | idx << 2 | neg << 4 | chtp << 5
    b2 = dt | rs << 2 | ri << 3 | cw << 5
    b4 = szi | pe_ok << 4 | op << 5 | ai1k << 6 | rw0 << 7
    b6, extra = divmod(length, 8)
    assert extra < 16 and b6 < 256
    b5 = osmode | omit_sz << 2 | omit_os << 3 | extra << 4
    rec = bytes([0, b1, b2, sq, b4, b5, b6])
    return rec + bytes([(sq * 7 + i) & 0xff for i in range(length)]) if fill is None else rec + fill * length
def ack(os_, sq, tx=1, origin=0, omit_os=0, omit_sq=0, x64=0):
    b1 = (4 if tx else 0) | omit_os << 3 | x64 << 4 | omit_sq << 5 | origin << 6
    return bytes([4, b1, sq, os_ >> 8, os_ & 0xff])
def notice(idx=0, origin=0, err_topic=1, ri=1, fd=None, et=1):
    b1 = idx | origin << 3 | err_topic << 6
    b2 = ri | (4 if fd is not None else 0) | ((fd or 0) << 3) | et << 5
    return bytes([5, b1, b2])
TICK = bytes([6])
def send(dest=0, req=1, size16=10, t=3):
    return bytes([7, dest | (4 if req else 0) | t << 4, size16])
seeds = {
 'three_chunks': chunk(0,1024)+chunk(1,1024)+chunk(2,952,dt=1),
 'three_reversed': chunk(2,952,dt=1)+chunk(1,1024)+chunk(0,1024),
 'reply_to_request': chunk(0,100,chtp=2,ri=1,szi=2,dt=1)+TICK,
 'reply_multi': chunk(0,1024,chtp=2,ri=1,szi=4)+chunk(1,1024,chtp=2,ri=1,szi=4)+TICK+chunk(2,952,chtp=2,ri=1,szi=4,dt=1),
 'reliable_dup': chunk(0,100,rs=1,szi=2,dt=1)+chunk(0,100,rs=1,szi=2,dt=1)+TICK+chunk(0,100,rs=1,szi=2,dt=1),
 'acks': ack(1024,0)+ack(2048,1)+ack(3000,2)+TICK+ack(5,0,origin=1),
 'error_notice': notice(ri=1, origin=0)+notice(ri=1, origin=1, fd=0),
 'request_in': chunk(0,100,origin=2,ri=2,szi=2,dt=1)+chunk(0,1,origin=2,idx=1,ri=2,szi=1,dt=1)+TICK+TICK+ack(0,0,tx=0,origin=2)+TICK,
 'request_timeout': send(0,1,4,0)+TICK+TICK,
 'ooo_overflow': b''.join(chunk(sq,100,cw=2,szi=5) for sq in range(1,20)),
 'idle_timeout': chunk(0,1024)+TICK+chunk(1,1024),
 'size_refused': chunk(0,10,szi=9)+chunk(0,10,szi=8),
 'sender_abort': chunk(0,1024)+chunk(1,0,dt=2),
 'sends': send(0,1)+send(1,0)+send(2,1)+TICK+ack(1024,0),
 'empty_blob': chunk(0,0,szi=0,dt=1),
}
for k, v in seeds.items():
    open(os.path.join(out, k), 'wb').write(v)
print(len(seeds))
