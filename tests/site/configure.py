# configure.py — tests/e2e/test_site.sh's "local/resources.json change", done as
# integrations/flare/README.md says and with the README's own snippet: the first ```json block
# after "**After**" is the job_launcher entry. It takes the provisioned resources.json.default
# (the README: "local/resources.json or resources.json.default"), puts the README's entry in place
# of the process_launcher entry (replaced, not added beside), sets its socket_path to this site's
# cjrelayd socket and writes local/resources.json. Prints the entry it wrote.
#   configure.py README SITE_DIR SOCKET [ARG=JSON ...]
# Each ARG=JSON sets one more launcher arg (test_site.sh's marked workarounds, when it needs any).
import json
import os
import re
import sys


def doc_entry(readme):
    text = open(readme, encoding="utf-8").read()
    after = text.index("**After**")
    m = re.search(r"```json\n(.*?)```", text[after:], re.S)
    if not m:
        sys.exit(f"configure.py: no json block after **After** in {readme}")
    return json.loads(m.group(1).strip().rstrip(","))


def main(readme, site, socket, *extra):
    local = os.path.join(site, "local")
    src = os.path.join(local, "resources.json")
    if not os.path.exists(src):
        src = os.path.join(local, "resources.json.default")
    conf = json.load(open(src, encoding="utf-8"))
    entry = doc_entry(readme)
    entry.setdefault("args", {})["socket_path"] = socket
    for kv in extra:
        k, v = kv.split("=", 1)
        entry["args"][k] = json.loads(v)
    comps = conf["components"]
    idx = [i for i, c in enumerate(comps) if c.get("id") == "process_launcher"]
    if len(idx) != 1:
        sys.exit(f"configure.py: {src} has {len(idx)} process_launcher entries, not 1")
    comps[idx[0]] = entry
    with open(os.path.join(local, "resources.json"), "w", encoding="utf-8") as f:
        json.dump(conf, f, indent=2)
    print(json.dumps(entry))


if __name__ == "__main__":
    main(*sys.argv[1:])
