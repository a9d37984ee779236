#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# spdx-add.sh — the SPDX licence line of the source files: which files carry one, in which
# comment syntax (WANT below, the one table), and the fixer that inserts it.
#
#   sh tests/spdx-add.sh [DIR]          insert the line in every file of DIR that lacks it
#   sh tests/spdx-add.sh --check [DIR]  list the files that lack it (exit 1 if any); never writes
#
# DIR is a cjrelay source tree (default: this one); its files are the ones git tracks there,
# or every file outside build/ and .git/ when it is not a git work tree. A file carries the
# line as its first line, or as its second after a "#!" line:
#   C sources and headers                      /* SPDX-License-Identifier: Apache-2.0 */
#   shell, Python, make, systemd units,
#     drop-ins, sysusers.d and tmpfiles.d      # SPDX-License-Identifier: Apache-2.0
#   man page sources (roff, doc/man/*.in)      .\" SPDX-License-Identifier: Apache-2.0
# Left without one (LICENSE and debian/copyright cover them): the docs, the INI files (sites
# copy and edit them; conf/cjrelay.ini is generated from the key table), test vectors and
# corpora, debian/'s metadata, pyproject.toml (its license field says it).
# Run by hand: the fixer rewrites files; make check runs only --check (tests/e2e/test_licence.sh).

# WANT: reads paths (relative to the tree) on stdin, prints "PATH<TAB>LINE" for each file that
# should carry LINE and does not
WANT='
function want(p,    b) {
    b = p; sub(/.*\//, "", b)
    if (b ~ /\.[ch]$/) return "/* " ID " */"
    if (b ~ /\.(sh|py)$/ || b == "Makefile" || p == "debian/rules" ||
        p ~ /^systemd\/.*\.(service|sysusers|tmpfiles|conf\.example)$/) return "# " ID
    if (p ~ /^doc\/man\/.*\.in$/) return ".\\\" " ID
    if (b !~ /\./ && first(p) ~ /^#!/) return "# " ID     # a script without a suffix (.ci/run)
    return ""
}
function first(p,    l) { l = ""; getline l < p; close(p); return l }
BEGIN { ID = "SPDX-License-Identifier: Apache-2.0"; FS = "\n" }
{
    w = want($0)
    if (w == "") next
    l1 = l2 = ""
    if ((getline l1 < $0) > 0 && l1 ~ /^#!/) getline l2 < $0
    close($0)
    if ((l1 ~ /^#!/ ? l2 : l1) != w) print $0 "\t" w
}'

check=
[ "$1" = --check ] && { check=1; shift; }
dir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$dir" || exit 2
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then git ls-files
else find . -path ./build -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||' | sort; fi |
    awk "$WANT" > "${TMPDIR:-/tmp}/spdx.$$"
if [ -n "$check" ]; then
    cut -f 1 "${TMPDIR:-/tmp}/spdx.$$"
    [ ! -s "${TMPDIR:-/tmp}/spdx.$$" ]; rc=$?
else
    # each file rewritten in place (so it keeps its inode and mode): LINE first, or after its "#!"
    awk -F '\t' '{
        n = 0; while ((getline l < $1) > 0) a[++n] = l
        close($1)
        i = 1
        if (a[1] ~ /^#!/) { print a[1] > $1; i = 2 }
        print $2 > $1
        for (; i <= n; i++) print a[i] > $1
        close($1)
        print "spdx-add: " $1
    }' "${TMPDIR:-/tmp}/spdx.$$"; rc=$?
fi
rm -f "${TMPDIR:-/tmp}/spdx.$$"
exit $rc
