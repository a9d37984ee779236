# SPDX-License-Identifier: Apache-2.0
# pyhocon/__init__.py — test-only stand-in for the pyhocon package (not packaged for Debian),
# loaded only by tests/e2e/test_site.sh (tests/site/shim/sitecustomize.py puts this folder's parent
# last on sys.path, so an installed pyhocon wins). FLARE's CLI
# (nvflare.cli, nvflare.utils.cli_utils, nvflare.tool.kit.kit_config, nvflare.tool.poc) imports it
# at module load and keeps its own settings (~/.nvflare/config.conf) with it. This stand-in reads
# JSON (which is HOCON) and writes JSON, so it reads back all it writes: ConfigFactory.parse_string /
# parse_file / from_dict, ConfigTree (a dict with dotted-path get / put / pop), HOCONConverter.
# It does not parse HOCON syntax beyond JSON: a job config in .conf needs the real pyhocon.
import json
from collections import OrderedDict

_NOTHING = object()


class ConfigException(Exception):
    pass


class ConfigMissingException(ConfigException, KeyError):
    pass


def _split(key):
    parts, cur, quoted = [], "", False
    for ch in key:
        if ch == '"':
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


class ConfigTree(OrderedDict):
    def _walk(self, key, create):
        node, parts = self, _split(key)
        for p in parts[:-1]:
            nxt = OrderedDict.get(node, p)
            if not isinstance(nxt, ConfigTree):
                if not create:
                    return None, None
                nxt = ConfigTree()
                OrderedDict.__setitem__(node, p, nxt)
            node = nxt
        return node, parts[-1]

    def get(self, key, default=_NOTHING):
        node, last = self._walk(key, False)
        if node is not None and OrderedDict.__contains__(node, last):
            return OrderedDict.__getitem__(node, last)
        if default is _NOTHING:
            raise ConfigMissingException(f"No configuration setting found for key {key}")
        return default

    def put(self, key, value, append=False):
        node, last = self._walk(key, True)
        OrderedDict.__setitem__(node, last, _tree(value))

    def pop(self, key, default=_NOTHING):
        node, last = self._walk(key, False)
        if node is not None and OrderedDict.__contains__(node, last):
            return OrderedDict.pop(node, last)
        if default is _NOTHING:
            raise ConfigMissingException(f"No configuration setting found for key {key}")
        return default

    def get_string(self, key, default=_NOTHING):
        v = self.get(key, default)
        return None if v is None else str(v)

    def get_int(self, key, default=_NOTHING):
        return int(self.get(key, default))

    def get_bool(self, key, default=_NOTHING):
        return bool(self.get(key, default))

    def get_list(self, key, default=_NOTHING):
        return list(self.get(key, default))

    def get_config(self, key, default=_NOTHING):
        return self.get(key, default)

    def as_plain_ordered_dict(self):
        return json.loads(json.dumps(self), object_pairs_hook=OrderedDict)

    def __getitem__(self, key):
        return self.get(key)

    def __contains__(self, key):
        node, last = self._walk(key, False)
        return node is not None and OrderedDict.__contains__(node, last)


def _tree(v):
    if isinstance(v, dict) and not isinstance(v, ConfigTree):
        t = ConfigTree()
        for k, x in v.items():
            OrderedDict.__setitem__(t, k, _tree(x))
        return t
    if isinstance(v, list):
        return [_tree(x) for x in v]
    return v


class ConfigFactory:
    @staticmethod
    def parse_string(content, resolve=True):
        text = content.strip()
        return ConfigTree() if not text else _tree(json.loads(text, object_pairs_hook=OrderedDict))

    @staticmethod
    def parse_file(filename, encoding="utf-8", required=True, resolve=True):
        try:
            with open(filename, encoding=encoding) as f:
                return ConfigFactory.parse_string(f.read())
        except FileNotFoundError:
            if required:
                raise
            return ConfigTree()

    @staticmethod
    def from_dict(dictionary, root=False):
        return _tree(dict(dictionary))


class HOCONConverter:
    @staticmethod
    def to_json(config, compact=False, indent=2, level=0):
        return json.dumps(config, indent=None if compact else indent)

    @staticmethod
    def to_hocon(config, compact=False, indent=2, level=0):
        return json.dumps(config, indent=indent)
