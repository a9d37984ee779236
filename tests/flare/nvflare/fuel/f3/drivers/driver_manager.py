# SPDX-License-Identifier: Apache-2.0
"""Stand-in: nvflare.fuel.f3.drivers.driver_manager.DriverManager, the way FLARE finds a
custom driver in a folder of NVFLARE_COMM_DRIVER_PATH: the folder goes on sys.path, every
*.py under it is imported as a module named by its path relative to the folder, and each
concrete Driver subclass whose __init__ takes only self registers its supported_transports();
a class name seen once is not looked at again, and a module that fails to import is skipped."""

import importlib
import inspect
import os
import sys

from nvflare.fuel.f3.drivers.driver import Driver


class DriverManager:
    def __init__(self):
        self.drivers = {}
        self.class_cache = set()

    def register(self, driver_class):
        for scheme in driver_class.supported_transports():
            self.drivers.setdefault(scheme.lower(), driver_class)

    def search_folder(self, folder: str, package):
        if package is None and folder not in sys.path:
            sys.path.append(folder)
        for root, _, files in os.walk(folder):
            rel = root[len(folder):].strip("/").replace("/", ".")
            for name in files:
                if not name.endswith(".py"):
                    continue
                module = (rel + "." if rel else "") + name[:-3]
                if package:
                    module = package + "." + module
                try:
                    imported = importlib.import_module(module)
                except Exception as ex:
                    print(f"# driver ignored: error loading {module}: {ex}", file=sys.stderr)
                    continue
                for _, cls in inspect.getmembers(imported, inspect.isclass):
                    if cls.__name__ in self.class_cache:
                        continue
                    self.class_cache.add(cls.__name__)
                    if issubclass(cls, Driver) and not inspect.isabstract(cls):
                        if len(inspect.getfullargspec(cls.__init__).args) == 1:
                            self.register(cls)

    def find_driver_class(self, scheme_or_url: str):
        scheme = scheme_or_url.split(":", 1)[0] if ":" in scheme_or_url else scheme_or_url
        return self.drivers.get(scheme.lower())
