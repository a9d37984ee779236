#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# cjrelayd --check-config finds what a start would refuse, every problem
# with FILE:LINE and the key, all of them in one run, and exits 1; a start refuses the certain ones
# the same way (exit 1, not a restart loop's runtime failure):
#   the upstream's TLS files: missing, not PEM, a key that does not match the certificate, a key
#   readable by others, an expired certificate, a certificate from another CA;
#   the status socket's directory missing; the workers' command missing or not executable;
#   a single job's project_name missing (it has no default).
. "$(dirname "$0")/lib.sh"
D=$BUILD/cjrelayd
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
sh "$(dirname "$0")/../unit/tls_certs.sh" "$W/c" || { fail "tls_certs.sh could not make the certificates"; finish; }
chmod 600 "$W"/c/*.key
mkdir -p "$W/run"
# conf NAME KEY=VALUE...: an mtls site INI (valid as it is) with the given keys changed
conf() {
    _n=$1; shift
    relay_ini "$W/$_n.ini" upstream.url=stcp://127.0.0.1:9 upstream.connection_security=mtls \
        upstream.ca_file="$W/c/rootCA.pem" upstream.cert_file="$W/c/client.crt" upstream.key_file="$W/c/client.key" \
        status.socket="$W/run/status.sock" workers.listen="unix:$W/run/w.sock" "$@"
}
# refused NAME REGEX KEY=VALUE...: --check-config exits 1 and names the problem
refused() {
    _n=$1; _re=$2; shift 2
    conf "$_n" "$@"
    out=$($D -c "$W/$_n.ini" --check-config 2>&1); rc=$?
    if [ $rc -eq 1 ] && printf '%s' "$out" | grep -Eq "^$W/$_n.ini:[0-9]+: $_re"; then pass "$_n: exit 1, $(printf '%s' "$out" | head -1 | sed "s|$W|W|g")"
    else fail "$_n: rc $rc: $out"; fi
}

conf good
out=$($D -c "$W/good.ini" --check-config 2>&1); rc=$?
check "a correct mtls site: OK ($out)" sh -c "[ $rc -eq 0 ] && printf '%s' '$out' | grep -q ': OK$'"

refused missing-ca "upstream.ca_file: cannot read $W/c/nope.pem: No such file or directory" upstream.ca_file="$W/c/nope.pem"
refused missing-key "upstream.key_file: cannot read $W/c/nope.key: No such file or directory" upstream.key_file="$W/c/nope.key"
printf 'not a certificate\n' > "$W/c/junk.pem"
refused not-pem "upstream.ca_file: $W/c/junk.pem holds no PEM certificate" upstream.ca_file="$W/c/junk.pem"
cp "$W/c/server.key" "$W/c/other.key"; chmod 600 "$W/c/other.key"
refused key-mismatch "upstream.key_file: the key in $W/c/other.key does not match the certificate in $W/c/client.crt" upstream.key_file="$W/c/other.key"
cp "$W/c/client.key" "$W/c/open.key"; chmod 644 "$W/c/open.key"
refused world-readable-key "upstream.key_file: $W/c/open.key is readable by others \\(mode 0644\\)" upstream.key_file="$W/c/open.key"
refused expired-cert "upstream.cert_file: the certificate in $W/c/expired.crt has expired" upstream.cert_file="$W/c/expired.crt"
refused other-ca "upstream.cert_file: the certificate in $W/c/wrong.crt does not chain to the CA in $W/c/rootCA.pem" upstream.cert_file="$W/c/wrong.crt"
refused no-status-dir "status.socket: the socket's directory $W/nodir does not exist" status.socket="$W/nodir/status.sock"
refused missing-command "workers.command: $W/nope cannot be run: No such file or directory" workers.command="$W/nope --x" workers.count=1
printf '#!/bin/sh\n' > "$W/noexec"; chmod 644 "$W/noexec"
refused command-not-executable "workers.command: $W/noexec cannot be run: Permission denied" workers.command="$W/noexec" workers.count=1
refused bare-command-not-on-path "workers.command: cjtest-no-such-program is not an executable program on the PATH" workers.command=cjtest-no-such-program workers.count=1
# a required key has no silent default (a site daemon's jobs may bring it in their description)
refused no-project-name "\\[upstream\\] project_name is required" upstream.project_name=

# every problem in one run, each on its line of the file
conf many upstream.ca_file="$W/c/nope.pem" upstream.key_file="$W/c/open.key" status.socket="$W/nodir/s.sock"
out=$($D -c "$W/many.ini" --check-config 2>&1); rc=$?
note_txt=$(printf '%s' "$out" | sed "s|$W|W|g" | tr '\n' '|')
check "three mistakes, three problems in one run, then the count ($note_txt)" sh -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | grep -c '^$W/many.ini:[0-9]*: ') -eq 3 ] && printf '%s' \"$out\" | grep -q 'many.ini: 3 problem(s)'"
ca_line=$(grep -n '^ca_file' "$W/many.ini" | cut -d: -f1)
check "the problem names the key's line ($ca_line)" sh -c "printf '%s' \"$out\" | grep -q '^$W/many.ini:$ca_line: upstream.ca_file'"

# a start: the certain problems refuse it as a config error; the others are the running daemon's to log
out=$($D -c "$W/missing-ca.ini" 2>&1); rc=$?
check "a start with a missing ca_file: exit 1, the same message" sh -c "[ $rc -eq 1 ] && printf '%s' '$out' | grep -q 'upstream.ca_file: cannot read'"
conf expired-start upstream.cert_file="$W/c/expired.crt" upstream.reconnect_min=0.2
$D -c "$W/expired-start.ini" > "$W/expired-start.log" 2>&1 & P=$!
wait_for 10 test -S "$W/run/status.sock"
check "a start with an expired certificate runs (the handshake's refusal is logged and retried)" kill -0 "$P"
kill -TERM "$P" 2>/dev/null; wait "$P" 2>/dev/null
# long lines: a worker command of 4 KiB and more loads, in the daemon and in cjrelayctl -c (which
# reads [status] socket from the same file); past the bound, the line is named
long_cmd="$BUILD/cjrelay-worker"
while [ ${#long_cmd} -lt 5000 ]; do long_cmd="$long_cmd --data=/srv/fl/site-1/venvs/trainer/lib/python3/site-packages/x${#long_cmd}"; done
long_cmd="$long_cmd --last-arg"
conf long-command workers.command="$long_cmd"
out=$($D -c "$W/long-command.ini" --check-config 2>&1); rc=$?
check "a worker command of ${#long_cmd} characters: OK ($(printf '%s' "$out" | sed "s|$W|W|g" | head -c 200))" sh -c "[ $rc -eq 0 ] && printf '%s' '$out' | grep -q ': OK$'"
$D -c "$W/long-command.ini" > "$W/long-command.log" 2>&1 & P=$!
wait_for 10 test -S "$W/run/status.sock"
shown=$($BUILD/cjrelayctl -c "$W/long-command.ini" show config json | jq -r '.config[] | select(.key == "workers.command") | .value')
check "cjrelayctl -c reads the same file; show config has the whole command (${#shown} characters)" [ "$shown" = "$long_cmd" ]
kill -TERM "$P" 2>/dev/null; wait "$P" 2>/dev/null
too_long="x"
while [ ${#too_long} -le 16384 ]; do too_long="$too_long$too_long"; done
refused long-line "line too long \\(at most 16384 characters before a comment\\)" workers.command="$BUILD/cjrelay-worker $too_long"
refused long-command "command = '.{60}\\.\\.\\.': too long \\(at most 8191 bytes\\)" workers.command="$BUILD/cjrelay-worker $(printf '%s' "$too_long" | head -c 9000)"
finish
