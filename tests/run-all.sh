#!/bin/sh
# make check's runner: every suite, then one closing line "N passed, M failed".
cd "$(dirname "$0")/.." || exit 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
total_p=0; total_f=0; status=0
run() {   # run <summary-name> <command...>
    name=$1; shift
    SUMMARY_FILE="$tmp/$name" "$@" || status=1
    if [ -s "$tmp/$name" ]; then
        read -r p f < "$tmp/$name"
    else
        p=0; f=1; echo "$name: produced no summary"
    fi
    total_p=$((total_p + p)); total_f=$((total_f + f))
}
run unit      sh tests/run-unit.sh unit build/tests/test_*
run unit-san  sh tests/run-unit.sh asan+ubsan build/san/tests/test_*
for s in tests/e2e/test_*.sh; do
    [ -f "$s" ] || continue
    run "e2e-$(basename "$s" .sh)" sh tests/e2e/run-one.sh "$s"
done
echo
echo "$total_p passed, $total_f failed"
[ $status -eq 0 ] && [ $total_f -eq 0 ]
