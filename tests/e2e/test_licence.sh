#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The licence (Apache-2.0) is stated wherever a site that ships cjrelay looks for it:
# (a) LICENSE at the root is the Apache License 2.0's full text, and the launcher's own
#     integrations/flare/LICENSE (its wheel's licence file) is the same file;
# (b) debian/copyright (DEP-5) gives Apache-2.0 for the whole source, "The cjrelay authors";
# (c) the launcher's pyproject.toml: license and the classifier, and its built metadata
#     (the wheel make wheel builds) says so;
# (d) the README has a Licence section;
# (e) every tracked source file carries the SPDX line (tests/spdx-add.sh --check lists the
#     ones without it: run `sh tests/spdx-add.sh` to add them), and the fixer, run on a
#     scratch copy of the tree (never on this one), leaves none without it, changes nothing
#     run again, keeps every file's mode, the shell, Python and make files it touched still
#     parse, and the man pages built from its roff sources are the same pages.
. "$(dirname "$0")/lib.sh"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PY=/usr/bin/python3
AL=/usr/share/common-licenses/Apache-2.0

# ---- (a) LICENSE ---------------------------------------------------------------------
if [ -f "$AL" ]; then
    check "LICENSE is the Apache License 2.0 ($AL)" cmp -s "$ROOT/LICENSE" "$AL"
else
    check "LICENSE is the Apache License 2.0 (its title, version and appendix)" sh -c "grep -q '^ *Apache License$' '$ROOT/LICENSE' && grep -q '^ *Version 2.0, January 2004$' '$ROOT/LICENSE' && grep -q 'APPENDIX: How to apply the Apache License' '$ROOT/LICENSE'"
fi
check "integrations/flare/LICENSE is the same text" cmp -s "$ROOT/LICENSE" "$ROOT/integrations/flare/LICENSE"

# ---- (b) debian/copyright ------------------------------------------------------------
CR=$ROOT/debian/copyright
check "debian/copyright is DEP-5" grep -qx 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' "$CR"
# the paragraphs, blank-line separated: "Files: *" gives Apache-2.0 and the authors, and a
# stand-alone License: Apache-2.0 paragraph points at the common-licenses copy
check "debian/copyright: Files: * is Apache-2.0, copyright The cjrelay authors" \
    awk 'BEGIN { RS = "" } /(^|\n)Files: \*\n/ && /\nLicense: Apache-2.0(\n|$)/ && /\nCopyright: [0-9-]+ The cjrelay authors\n/ { ok = 1 } END { exit !ok }' "$CR"
check "debian/copyright: the Apache-2.0 paragraph names /usr/share/common-licenses/Apache-2.0" \
    awk 'BEGIN { RS = "" } /^License: Apache-2.0\n/ && /\/usr\/share\/common-licenses\/Apache-2.0/ { ok = 1 } END { exit !ok }' "$CR"
check "debian/copyright: no other licence and no 'all rights reserved'" \
    sh -c "[ \"\$(grep '^License:' '$CR' | sort -u)\" = 'License: Apache-2.0' ] && ! grep -qi 'rights reserved\|unlicensed\|must not be redistributed' '$CR'"

# ---- (c) the Python package's metadata ------------------------------------------------
PP=$ROOT/integrations/flare/pyproject.toml
if [ -x "$PY" ] && $PY -c 'import tomllib' 2>/dev/null; then
    check "pyproject.toml: license Apache-2.0 and the OSI Apache classifier" $PY -c "
import tomllib, sys
p = tomllib.load(open('$PP', 'rb'))['project']
sys.exit(not (p.get('license') == {'text': 'Apache-2.0'}
              and 'License :: OSI Approved :: Apache Software License' in p.get('classifiers', [])))"
else
    check "pyproject.toml: license Apache-2.0 and the OSI Apache classifier" \
        sh -c "grep -q '^license = {text = \"Apache-2.0\"}' '$PP' && grep -q 'License :: OSI Approved :: Apache Software License' '$PP'"
fi
if make -s -C "$ROOT" wheel > "$W/wheel.log" 2>&1; then
    whl=$(ls "$ROOT"/build/python/cjrelay_flare-*-py3-none-any.whl | head -n 1)
    $PY -m zipfile -e "$whl" "$W/whl" 2>/dev/null
    meta=$(ls "$W"/whl/cjrelay_flare-*.dist-info/METADATA)
    check "the wheel's METADATA: License: Apache-2.0 and the classifier" \
        sh -c "grep -qx 'License: Apache-2.0' '$meta' && grep -qx 'Classifier: License :: OSI Approved :: Apache Software License' '$meta'"
    check "the wheel holds the licence text" sh -c "cmp -s '$ROOT/LICENSE' \$(ls -d '$W'/whl/cjrelay_flare-*.dist-info)/LICENSE"
else
    fail "make wheel"; note "$W/wheel.log"
fi

# ---- (d) the README ----------------------------------------------------------------------
check "README.md has a Licence section naming the Apache License 2.0 and LICENSE" \
    awk '/^## / { in_l = ($0 ~ /^## Licen[cs]e/) } in_l && /Apache License/ { a = 1 } in_l && /`LICENSE`/ { l = 1 } END { exit !(a && l) }' "$ROOT/README.md"

# ---- (e) the SPDX line ---------------------------------------------------------------------
if sh "$ROOT/tests/spdx-add.sh" --check "$ROOT" > "$W/missing"; then
    pass "every tracked source file carries the SPDX line"
else
    fail "$(wc -l < "$W/missing") tracked source files lack the line 'SPDX-License-Identifier: Apache-2.0' (sh tests/spdx-add.sh adds it):"
    note "$W/missing"
fi

# the fixer on a scratch copy of the tracked files
if git -C "$ROOT" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    mkdir -p "$W/tree"
    (cd "$ROOT" && git ls-files -z | xargs -0 tar -cf - 2>/dev/null) | tar -xf - -C "$W/tree"
    # the copy as it was before the line: taken out of every file, so that the fixer has work
    (cd "$W/tree" && grep -rlZ 'SPDX-License-Identifier: Apache-2.0' . | xargs -0 -r sed -i \
        -e '\|^/\* SPDX-License-Identifier: Apache-2.0 \*/$|d' -e '/^# SPDX-License-Identifier: Apache-2.0$/d' \
        -e '/^\.\\" SPDX-License-Identifier: Apache-2.0$/d')
    mkdir -p "$W/man.old" && cp "$W"/tree/doc/man/*.in "$W/man.old/"
    sh "$ROOT/tests/spdx-add.sh" --check "$W/tree" > "$W/before"
    (cd "$W/tree" && find . -type f -exec stat -c '%a %n' {} + | sort) > "$W/modes1"
    sh "$ROOT/tests/spdx-add.sh" "$W/tree" > "$W/fixed" 2>&1
    check "the fixer adds the line to each file without it ($(wc -l < "$W/fixed") files)" \
        sh -c "[ \$(wc -l < '$W/fixed') -eq \$(wc -l < '$W/before') ]"
    check "after the fixer, --check finds none without it" sh "$ROOT/tests/spdx-add.sh" --check "$W/tree"
    (cd "$W/tree" && find . -type f -print0 | sort -z | xargs -0 md5sum) > "$W/sums1"
    sh "$ROOT/tests/spdx-add.sh" "$W/tree" > "$W/fixed2" 2>&1
    (cd "$W/tree" && find . -type f -print0 | sort -z | xargs -0 md5sum) > "$W/sums2"
    check "the fixer run again changes nothing" sh -c "[ ! -s '$W/fixed2' ] && cmp -s '$W/sums1' '$W/sums2'"
    (cd "$W/tree" && find . -type f -exec stat -c '%a %n' {} + | sort) > "$W/modes2"
    check "the fixer keeps every file's mode" cmp -s "$W/modes1" "$W/modes2"
    # the kinds of line, each as its kind wants it
    c1=$(grep '\.c$' "$W/before" | head -n 1); s1=$(grep '\.sh$' "$W/before" | head -n 1)
    if [ -n "$c1" ]; then
        check "a C file's first line is /* SPDX-License-Identifier: Apache-2.0 */ ($c1)" \
            sh -c "head -n 1 '$W/tree/$c1' | grep -qxF '/* SPDX-License-Identifier: Apache-2.0 */'"
    fi
    if [ -n "$s1" ]; then
        check "a script keeps its #! first, the line second ($s1)" \
            sh -c "head -n 1 '$W/tree/$s1' | grep -q '^#!' && sed -n 2p '$W/tree/$s1' | grep -qxF '# SPDX-License-Identifier: Apache-2.0'"
    fi
    bad=
    while IFS= read -r f; do
        case $f in
            *.sh|.ci/run) sh -n "$W/tree/$f" 2>> "$W/parse" || bad="$bad $f" ;;
            *.py) [ -x "$PY" ] && { PYTHONPYCACHEPREFIX=$W/pyc $PY -m py_compile "$W/tree/$f" 2>> "$W/parse" || bad="$bad $f"; } ;;
        esac
    done < "$W/before"
    check "the shell and Python files it touched still parse${bad:+: $bad}" sh -c "[ -z '$bad' ]"
    check "the Makefile still parses (make -n)" make -s -n -C "$W/tree" -f Makefile clean
    check "debian/rules still parses (make -n)" make -s -n -C "$W/tree" -f debian/rules override_dh_auto_test
    # mangen passes the roff comment through: each page is the one built from the tree, the line first
    if [ -x "$ROOT/build/mangen" ]; then
        for p in "$W"/tree/doc/man/*.in; do
            n=$(basename "$p" .in)
            "$ROOT/build/mangen" page "$p" > "$W/$n.new" 2>&1 && "$ROOT/build/mangen" page "$W/man.old/$n.in" > "$W/$n.old" 2>&1
            check "the man page $n from its fixed source: the old page, the comment first" \
                sh -c "head -n 1 '$W/$n.new' | grep -qxF '.\\\" SPDX-License-Identifier: Apache-2.0' && tail -n +2 '$W/$n.new' | cmp -s - '$W/$n.old'"
        done
    else skip "the man pages from the fixed sources (build/mangen: make all builds it)"; fi
else
    skip "the fixer on a scratch copy (not a git work tree)"
fi
finish
