# lib.sh — shared by the shell end-to-end tests (sourced).  Each test prints
# "ok - name" / "not ok - name" and ends with finish, which writes the counts.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$ROOT/build
_p=0; _f=0
pass() { _p=$((_p + 1)); echo "ok - $*"; }
fail() { _f=$((_f + 1)); echo "not ok - $*"; }
skip() { echo "skip - $*"; }
check() { # check "name" command...
    name=$1; shift
    if "$@" >/dev/null; then pass "$name"; else fail "$name"; fi
}
finish() {
    echo "$(basename "$0" .sh): $_p passed, $_f failed"
    echo "$_p $_f" > "${SUMMARY_FILE:-/dev/null}"
    [ $_f -eq 0 ]; exit $?
}
