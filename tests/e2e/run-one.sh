#!/bin/sh
# Runs one e2e test script with a time limit; its summary goes to $SUMMARY_FILE.
t=$1
echo "== $(basename "$t")"
timeout --kill-after=10 "${E2E_TIMEOUT:-300}" sh "$t"
