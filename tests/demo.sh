#!/bin/sh
# make demo: the end-to-end run on cjrelay's own simulator.
echo "demo: not yet — the end-to-end relay (issue 5) has not landed; build is OK:"
for b in cjrelayd cjrelayctl cjrelay-sim cjrelay-worker; do build/$b --version; done
