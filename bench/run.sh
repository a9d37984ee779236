#!/bin/sh
echo "bench: not yet (issue 7)"
