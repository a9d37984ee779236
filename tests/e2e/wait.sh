# SPDX-License-Identifier: Apache-2.0
# wait.sh — wait_for, sourced by the e2e suites (lib.sh), make bench and make wan.
# wait_for SECS CMD...: polls CMD (output discarded) every 0.1 s; 1 when it never succeeded
wait_for() {
    _wn=$(($1 * 10)); shift
    while [ "$_wn" -gt 0 ]; do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1; _wn=$((_wn - 1))
    done
    return 1
}
