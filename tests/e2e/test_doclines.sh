#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every log line the documentation quotes is one the code writes.
# The quotes: in README.md, doc/*.md and integrations/flare/README.md, the backquoted spans of a
# table column headed "what the log says", the spans a "where to look" cell calls "the log's …
# lines", and the "…"-quoted strings in the comment of a command line that greps a log
# (journalctl … | grep …, grep … log.txt).  Each is matched against the format strings of
# lib/ and cmd/ (C string literals, adjacent ones joined) and of the FLARE launcher
# (integrations/flare/cjrelay_flare, Python strings and f-strings): `…`, `...`, <placeholders>
# and all-capital words (N, S, URL) in a quote, and printf conversions or {expressions} in
# the code, match any text; a quote may be part of a longer line.  A quote no format string
# can produce fails, naming the document and line.
. "$(dirname "$0")/lib.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
# the checker: doclines.py ROOT [DOC...] (DOC: documents to read instead of the project's)
cat > "$W/doclines.py" <<'EOF'
import glob, os, re, sys
from functools import lru_cache

root = sys.argv[1]
W = "\0"   # a wildcard, in quotes and formats alike

# ---- the quotes -----------------------------------------------------------------------------
def spans(text):
    return [s for s in re.findall(r"`([^`]+)`", text)]

def cells(line):
    line = line.strip().strip("|").replace("\\|", "\x01")
    return [c.replace("\x01", "|").strip() for c in line.split("|")]

def not_a_log_line(s):
    """Commands, show-output field names and answers beside the log's lines in a cell."""
    return s.startswith(("show ", "cjrelayctl ", "ERR ")) or re.fullmatch(r"[a-z_]+", s) is not None

def quotes_of(path):
    rel = os.path.relpath(path, root)
    lines = open(path, encoding="utf-8").read().split("\n")
    header = None
    fenced = False
    for no, line in enumerate(lines, 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced and "grep" in line and "#" in line:
            comment = line.split("#", 1)[1]
            for q in re.findall(r"\"([^\"]+)\"", comment):
                yield rel, no, q
            continue
        if not line.startswith("|"):
            header = None
            continue
        c = cells(line)
        if header is None:
            header = [h.lower() for h in c]
            continue
        if set("".join(c)) <= set("-: "):
            continue
        for h, cell in zip(header, c):
            if h == "what the log says":
                for s in spans(cell):
                    if not not_a_log_line(s):
                        yield rel, no, s
            elif h == "where to look":
                for part in re.findall(r"the log's (.*?) lines", cell):
                    for s in spans(part):
                        yield rel, no, s

docs = [os.path.join(root, "README.md"), os.path.join(root, "integrations/flare/README.md")]
docs += sorted(glob.glob(os.path.join(root, "doc/*.md")))
if sys.argv[2:]: docs = sys.argv[2:]
quotes = [q for d in docs if os.path.exists(d) for q in quotes_of(d)]

def quote_pattern(q):
    q = re.sub(r"<[^<>]*>", W, q)
    q = q.replace("…", W).replace("...", W)
    q = re.sub(r"\b[A-Z]{1,5}\b", W, q)
    return re.sub(W + r"+", W, q)

# ---- the code's format strings ----------------------------------------------------------------
C_ESC = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r", "0": "\0"}

def c_literals(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    out, cur, last_end = [], None, -1
    for m in re.finditer(r'"((?:[^"\\\n]|\\.)*)"', text):
        s = re.sub(r"\\(.)", lambda e: C_ESC.get(e.group(1), e.group(1)), m.group(1))
        if cur is not None and text[last_end:m.start()].strip() == "":
            cur += s          # adjacent literals are one string
        else:
            if cur is not None: out.append(cur)
            cur = s
        last_end = m.end()
    if cur is not None: out.append(cur)
    return out

def c_pattern(s):
    s = s.replace("%%", "\x02")
    s = re.sub(r"%[-+ #0]*(\*|\d+)?(\.(\*|\d+))?(hh|h|ll|l|z|j|t|L)?[diouxXeEfgGsScpm]", W, s)
    s = re.sub(r'"\s*PRI[diuxX](8|16|32|64)\s*"', W, s)
    return s.replace("\x02", "%")

def py_literals(text):
    for m in re.finditer(r"(?<![A-Za-z0-9_])([rfbRFB]{0,2})(\"\"\"|'''|\"|')((?:\\.|(?!\2).)*?)\2", text, re.S):
        prefix, body = m.group(1).lower(), m.group(3)
        if "f" in prefix:
            body = re.sub(r"\{[^{}]*\}", W, body.replace("{{", "\x03").replace("}}", "\x04"))
            body = body.replace("\x03", "{").replace("\x04", "}")
        body = re.sub(r"%[-+ #0]*\d*(\.\d+)?[sdrfgx]", W, body)
        yield body

formats = []
for path in sorted(glob.glob(os.path.join(root, "lib/*/*.c")) + glob.glob(os.path.join(root, "cmd/*/*.c"))):
    for s in c_literals(open(path, encoding="utf-8", errors="replace").read()):
        formats.append((os.path.relpath(path, root), re.sub(W + "+", W, c_pattern(s))))
for path in sorted(glob.glob(os.path.join(root, "integrations/flare/cjrelay_flare/**/*.py"), recursive=True)):
    for s in py_literals(open(path, encoding="utf-8").read()):
        formats.append((os.path.relpath(path, root), re.sub(W + "+", W, s)))

# ---- matching ------------------------------------------------------------------------------
# A format may make the whole quoted line, or a part of it that another fills in (a reason put in
# with %s): each format aligned with the quote (both may be part of a longer line) covers the
# quote's literal characters it matches with literal characters of its own; the quote passes when
# the formats that match at least MIN_ALIGN characters cover COVER of them between them.
MIN_ALIGN, COVER = 4, 0.85

def align(q, f):
    """The quote positions of the best alignment of q with f (both free at either end)."""
    q, f = W + q + W, W + f + W
    n, m = len(q), len(f)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    how = [[0] * (m + 1) for _ in range(n + 1)]
    NEG = -1
    for i in range(n, -1, -1):
        for j in range(m, -1, -1):
            if i == n and j == m: continue
            b, h = NEG, 0
            if i < n and q[i] == W:
                if best[i + 1][j] > b: b, h = best[i + 1][j], 1
                if j < m and best[i][j + 1] > b: b, h = best[i][j + 1], 2
            if j < m and f[j] == W:
                if best[i][j + 1] > b: b, h = best[i][j + 1], 2
                if i < n and best[i + 1][j] > b: b, h = best[i + 1][j], 1
            if i < n and j < m and q[i] == f[j] and q[i] != W and best[i + 1][j + 1] >= 0 \
                    and best[i + 1][j + 1] + 1 > b:
                b, h = best[i + 1][j + 1] + 1, 3
            best[i][j], how[i][j] = b, h
    if best[0][0] < MIN_ALIGN: return set()
    i = j = 0
    got = set()
    while (i, j) != (n, m):
        h = how[i][j]
        if h == 3: got.add(i - 1); i += 1; j += 1
        elif h == 1: i += 1
        else: j += 1
    return got

def grams(s, k=6):
    return {s[i:i + k] for i in range(len(s) - k + 1)}

fgrams = [(src, f, grams(f)) for src, f in formats]
words = {f: src for src, f in formats if re.fullmatch(r"[A-Za-z_]{3,12}", f)}
bad = 0
for doc, no, q in quotes:
    p = quote_pattern(q)
    lit = [i for i, c in enumerate(p) if c != W]
    if len("".join(p[i] for i in lit).strip(" :.;,()-")) < 6:
        print(f"skip - {doc}:{no}: `{q}`: too little literal text to check")
        continue
    qg = grams(p)
    cands = sorted(((len(qg & g), src, f) for src, f, g in fgrams if qg & g), reverse=True)[:40]
    # words the code puts in with %s ("lost", "connecting") are literals too short to share a gram
    cands += [(0, src, f) for f, src in words.items() if re.search(r"(?<![A-Za-z_])" + re.escape(f) + r"(?![A-Za-z_])", p)]
    covered, used = set(), []
    for _, src, f in cands:
        got = align(p, f)
        if got - covered:
            covered |= got
            used.append(src)
    share = len(covered) / len(lit)
    if share >= COVER:
        print(f"ok - {doc}:{no}: `{q}` ({', '.join(dict.fromkeys(used))}; {share:.0%})")
    else:
        bad += 1
        print(f"not ok - {doc}:{no}: `{q}`: the code writes {share:.0%} of it at most (lib/, cmd/, the launcher)")
print(f"# {len(quotes)} quotes")
EOF
out=$(python3 "$W/doclines.py" "$ROOT")
printf "%s\n" "$out" | grep -v "^skip - \|^# "
printf '%s\n' "$out" | grep '^skip - \|^# ' | sed 's/^/# /'
n_ok=$(printf '%s\n' "$out" | grep -c '^ok - ')
n_bad=$(printf '%s\n' "$out" | grep -c '^not ok - ')
check "the documentation quotes log lines ($n_ok found in the code)" [ "$n_ok" -ge 10 ]
check "every quoted log line is written by the code ($n_bad not)" [ "$n_bad" -eq 0 ]

# the checker itself: a made-up line fails, in a table and in a grep's comment; real ones pass
cat > "$W/doc.md" <<'EOF'
| what you see | what the log says | what to do |
|---|---|---|
| a | `worker <fqcn> (pid N) exploded into N pieces: <why>` | b |
| a | `job <id> ended: outcome 0 (…)`; `show info job ID` has `upstream_last_error` | b |

```sh
journalctl -u cjrelay | grep <job_id>   # "job <id> launched its trainer", "job <id> started: …"
```
EOF
self=$(python3 "$W/doclines.py" "$ROOT" "$W/doc.md")
check "the checker fails a made-up quote in a table" sh -c "printf '%s' \"\$1\" | grep -q '^not ok - .*doc.md:3: .worker <fqcn> (pid N) exploded'" - "$self"
check "... and in a grep's comment" sh -c "printf '%s' \"\$1\" | grep -q '^not ok - .*doc.md:7: .job <id> launched its trainer'" - "$self"
check "... passes the real ones and leaves out the show field and command" \
    sh -c "[ \$(printf '%s\n' \"\$1\" | grep -c '^ok - ') = 2 ] && [ \$(printf '%s\n' \"\$1\" | grep -c '^not ok - ') = 2 ]" - "$self"
finish
