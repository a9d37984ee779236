# SPDX-License-Identifier: Apache-2.0
# cjrelay — GNU make build.
#
#   make            build/libcjrelay.a, the four binaries and the man pages (build/man/)
#   make deps       install the Debian packages that are missing (as root)
#   make check      deps, build, unit tests, unit tests again under ASan+UBSan, the
#                   end-to-end suites, then the main e2e suites again with the binaries
#                   built under ASan+UBSan in build/san/ (see tests/run-all.sh)
#   make fuzz       build the libFuzzer targets and run each for FUZZ_SECONDS (default
#                   60) one after the other: `make fuzz FUZZ_SECONDS=1800` runs every
#                   target for 30 minutes (the pre-release run)
#   make soak       deps, build, run tests/soak.sh (long; outside make check)
#   make demo       deps, build, run the end-to-end demo (SCHEME=tcp|stcp|http|https|grpc|grpcs)
#   make bench      deps, build -O2, run the benchmarks (numbers, not pass/fail)
#   make wan        deps, build, the relay over a slow and faulty link (bench/wan.sh; long,
#                   outside make check; WAN_SIZE_MIB=64 WAN_RESET_MIB=16 WAN_STALL=10 for a quick try)
#   make man        the man pages into build/man/ (make builds them too)
#   make deb        deps, then the Debian packages into build/deb/ (dpkg-buildpackage, lintian)
#   make install    PREFIX=/usr/local DESTDIR=: the daemon and cjrelayctl in bin/, the
#                   test tools (cjrelay-sim, cjrelay-worker) in lib/cjrelay/, the man
#                   pages, the units (UNITDIR), the sysusers.d and tmpfiles.d entries
#                   (install-relay), and the FLARE launcher cjrelay_flare where the
#                   system's Python finds it (install-flare: PYTHONDIR, below)
#   make wheel      the launcher's wheel into build/python/, built offline with the
#                   system's setuptools and wheel (pip installs it in a venv or conda env)
#
# Sources are found by wildcard: a new lib/<layer>/<file>.c, tests/unit/test_<name>.c
# or tests/fuzz/fuzz_<name>.c is picked up without editing this file.

CC       ?= cc
PKGS     := libevent libevent_openssl msgpack openssl inih libnghttp2
CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
OPT      ?= -O2 -g
CFLAGS   ?=
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# wslay (bookworm's libwslay-dev) ships no pkg-config file
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lwslay
CMOCKA_LIBS = $(shell pkg-config --libs cmocka 2>/dev/null)
ALL_CFLAGS = $(CSTD) $(WARN) $(OPT) -Ilib $(PKG_CFLAGS) $(CFLAGS)
LDLIBS   = $(PKG_LIBS) -lpthread -lm
# The targets below that build before running (check, demo, soak, fuzz, bench)
# compile on every core: a fresh clone's build is a third of make check's time.
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)

B        := build
LIB_SRC  := $(sort $(wildcard lib/*/*.c))
LIB_OBJ  := $(patsubst %.c,$(B)/obj/%.o,$(LIB_SRC))
BINS     := cjrelayd cjrelayctl cjrelay-sim cjrelay-worker
BIN_OUT  := $(addprefix $(B)/,$(BINS))
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
TEST_BIN := $(patsubst tests/unit/%.c,$(B)/tests/%,$(TEST_SRC))
E2E_SRC  := $(sort $(wildcard tests/e2e/*.c))
E2E_BIN  := $(patsubst tests/e2e/%.c,$(B)/tests/e2e/%,$(E2E_SRC))
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN := $(patsubst tests/fuzz/%.c,$(B)/fuzz/%,$(FUZZ_SRC))

# Sanitizer build of the library and unit tests (make check runs both).
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
SAN_OBJ  := $(patsubst %.c,$(B)/san/obj/%.o,$(LIB_SRC))
SAN_TEST := $(patsubst tests/unit/%.c,$(B)/san/tests/%,$(TEST_SRC))
SAN_BIN  := $(addprefix $(B)/san/,$(BINS))
SAN_E2E  := $(patsubst tests/e2e/%.c,$(B)/san/tests/e2e/%,$(E2E_SRC))

FUZZ_SECONDS ?= 60
SCHEME   ?= tcp
PREFIX   ?= /usr/local
DESTDIR  ?=

.PHONY: all san deps check unit unit-san fuzz fuzz-build soak demo bench bench-flare wan site interop man deb install install-relay install-flare wheel clean
.DEFAULT_GOAL := all

# Man pages: the hand-written doc/man/<page>.in with the tables filled in by
# build/mangen, which links the library and walks the tables the code uses.
MAN_IN   := $(sort $(wildcard doc/man/*.in))
# build/man/man<N>/<page>.<N>: MANPATH=build/man finds them (man, systemd-analyze verify).
MAN_OUT  := $(foreach f,$(MAN_IN),$(B)/man/man$(subst .,,$(suffix $(basename $(f))))/$(notdir $(basename $(f))))

all: $(B)/libcjrelay.a $(BIN_OUT) $(MAN_OUT)

deps:
	@sh tests/deps.sh

# ---- library and binaries -------------------------------------------------
$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(B)/libcjrelay.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

define BIN_RULE
$(B)/$(1): $(patsubst %.c,$(B)/obj/%.o,$(wildcard cmd/$(1)/*.c)) $(B)/libcjrelay.a
	$$(CC) $$(ALL_CFLAGS) -o $$@ $$(filter %.o,$$^) $(B)/libcjrelay.a $$(LDLIBS)
endef
$(foreach b,$(BINS),$(eval $(call BIN_RULE,$(b))))

$(B)/mangen: doc/man/mangen.c $(B)/libcjrelay.a
	$(CC) $(ALL_CFLAGS) -MMD -MP -o $@ $< $(B)/libcjrelay.a $(LDLIBS)

define MAN_RULE
$(B)/man/man$(1)/%: doc/man/%.in $(B)/mangen
	@mkdir -p $$(dir $$@)
	$(B)/mangen page $$< > $$@.tmp && mv $$@.tmp $$@
endef
$(foreach n,5 8,$(eval $(call MAN_RULE,$(n))))

man: $(MAN_OUT)

# ---- unit tests ------------------------------------------------------------
$(B)/tests/%: tests/unit/%.c tests/unit/testutil.h $(B)/libcjrelay.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/unit -MMD -MP -o $@ $< $(B)/libcjrelay.a $(CMOCKA_LIBS) $(LDLIBS)

$(B)/san/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN_FLAGS) -MMD -MP -c $< -o $@

$(B)/san/libcjrelay.a: $(SAN_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

# The four binaries and the e2e helpers under ASan+UBSan, for the e2e suites'
# sanitized pass (tests/e2e/lib.sh: CJ_SAN=1 makes CJ_BIN default to build/san).
define SAN_BIN_RULE
$(B)/san/$(1): $(patsubst %.c,$(B)/san/obj/%.o,$(wildcard cmd/$(1)/*.c)) $(B)/san/libcjrelay.a
	$$(CC) $$(ALL_CFLAGS) $$(SAN_FLAGS) -o $$@ $$(filter %.o,$$^) $(B)/san/libcjrelay.a $$(LDLIBS)
endef
$(foreach b,$(BINS),$(eval $(call SAN_BIN_RULE,$(b))))

$(B)/san/tests/e2e/%: tests/e2e/%.c $(B)/san/libcjrelay.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN_FLAGS) -Icmd/cjrelay-sim -MMD -MP -o $@ $< $(B)/san/libcjrelay.a $(LDLIBS)

san: $(B)/san/libcjrelay.a $(SAN_BIN) $(SAN_E2E)

$(B)/san/tests/%: tests/unit/%.c tests/unit/testutil.h $(B)/san/libcjrelay.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN_FLAGS) -Itests/unit -MMD -MP -o $@ $< $(B)/san/libcjrelay.a $(CMOCKA_LIBS) $(LDLIBS)

$(B)/tests/e2e/%: tests/e2e/%.c $(B)/libcjrelay.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Icmd/cjrelay-sim -MMD -MP -o $@ $< $(B)/libcjrelay.a $(LDLIBS)

unit: $(TEST_BIN)
	@sh tests/run-unit.sh plain $(TEST_BIN)

unit-san: $(SAN_TEST)
	@sh tests/run-unit.sh asan+ubsan $(SAN_TEST)

check: deps
	$(MAKE) -j$(JOBS) all
	$(MAKE) -j$(JOBS) $(TEST_BIN) $(SAN_TEST) $(E2E_BIN) $(SAN_BIN) $(SAN_E2E)
	@sh tests/run-all.sh

# ---- fuzzing (clang libFuzzer) ---------------------------------------------
# The library is compiled once into build/fuzz/libcjrelay.a (instrumented for
# coverage, not linked with libFuzzer's main); each target links only the
# objects it uses.
FUZZ_SAN    = -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS = $(CSTD) -g -O1 -Ilib $(PKG_CFLAGS) $(FUZZ_SAN)
FUZZ_OBJ   := $(patsubst %.c,$(B)/fuzz/obj/%.o,$(LIB_SRC))

$(B)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(B)/fuzz/libcjrelay.a: $(FUZZ_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(B)/fuzz/%: tests/fuzz/%.c $(B)/fuzz/libcjrelay.a
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(B)/fuzz/libcjrelay.a $(PKG_LIBS) -lpthread -lm

fuzz-build: $(FUZZ_BIN)

# Every target runs FUZZ_SECONDS (libFuzzer -max_total_time), one after the other,
# so the whole run takes about FUZZ_SECONDS x the number of targets.
fuzz: deps
	$(MAKE) -j$(JOBS) fuzz-build
	@sh tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_BIN)

# ---- soak (2,000 rounds, a worker killed every 100; long) ---------------------
soak: deps
	$(MAKE) -j$(JOBS) all $(E2E_BIN)
	@if [ -f tests/soak.sh ]; then sh tests/soak.sh; \
	 else echo "make soak: tests/soak.sh is missing (not written yet)" >&2; exit 1; fi

# ---- demo and install ------------------------------------------------------
demo: deps
	$(MAKE) -j$(JOBS) all
	@SCHEME=$(SCHEME) sh tests/demo.sh

# The floor of make bench: a plain epoll read/write relay (bench/floor.c).
$(B)/bench/floor: bench/floor.c
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(WARN) -O2 -o $@ $< $(shell pkg-config --libs openssl)

bench: deps
	$(MAKE) -j$(JOBS) all $(B)/bench/floor OPT="-O2 -g"
	@sh bench/run.sh

# The relay over a slow and faulty link, the long versions of test_wan (bench/wan.sh: a 1 GiB
# task and result through 20 Mbit/s and 80 ms, resets, a 60 s stall; WAN_* variables set sizes).
wan: deps
	$(MAKE) -j$(JOBS) all $(B)/tests/e2e/linkshaper
	@sh bench/wan.sh

# FLARE's whole POC site (tests/e2e/test_site.sh) with each FLARE tree of SITE_TREES (main, 2.8.1,
# 2.7.2: ../shared/flare/<tree>), each first running its job with FLARE's stock launcher to compare
# (SITE_STOCK=1); make check runs the shortest case (main, no stock run).
SITE_TREES ?= main
site: deps
	$(MAKE) -j$(JOBS) all
	@rc=0; for t in $(SITE_TREES); do \
	    FLARE_TREE=$$t SITE_STOCK=1 E2E_TIMEOUT=600 sh tests/e2e/run-one.sh tests/e2e/test_site.sh || rc=1; \
	done; exit $$rc

# FLARE's own POC site through cjrelayd for each FLARE tree x scheme x connection security
# (tests/interop.sh: INTEROP_TREES, INTEROP_SCHEMES, INTEROP_SECURITY; logs in build/interop/).
interop: deps
	$(MAKE) -j$(JOBS) all
	@sh tests/interop.sh

# What a real FLARE site pays for one job, stock against cjrelayd, in one run (bench/flare.sh:
# FLARE_TREE, default 2.8.1; SIZE, the model, default 512M).
bench-flare: deps
	$(MAKE) -j$(JOBS) all
	@sh bench/flare.sh

# The test tools are not commands an operator runs: they go to lib/cjrelay/.
UNITDIR     ?= $(PREFIX)/lib/systemd/system
TOOLDIR     ?= $(PREFIX)/lib/cjrelay
MANDIR      ?= $(PREFIX)/share/man
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
install: install-relay install-flare
install-relay: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(TOOLDIR) $(DESTDIR)$(PREFIX)/share/cjrelay \
	           $(DESTDIR)/etc/cjrelay $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 \
	           $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR)
	install -m 0755 $(B)/cjrelayd $(B)/cjrelayctl $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(B)/cjrelay-sim $(B)/cjrelay-worker $(DESTDIR)$(TOOLDIR)/
	install -m 0644 conf/cjrelay.ini $(DESTDIR)$(PREFIX)/share/cjrelay/cjrelay.ini.example
	install -d $(DESTDIR)$(PREFIX)/share/cjrelay/examples
	install -m 0644 conf/examples/*.ini $(DESTDIR)$(PREFIX)/share/cjrelay/examples/
	install -m 0644 $(filter %.5,$(MAN_OUT)) $(DESTDIR)$(MANDIR)/man5/
	install -m 0644 $(filter %.8,$(MAN_OUT)) $(DESTDIR)$(MANDIR)/man8/
	install -m 0644 systemd/cjrelay.sysusers $(DESTDIR)$(SYSUSERSDIR)/cjrelay.conf
	install -m 0644 systemd/cjrelay.tmpfiles $(DESTDIR)$(TMPFILESDIR)/cjrelay.conf
	for u in systemd/*.service; do \
	    sed 's|/usr/local/|$(PREFIX)/|g' "$$u" > $(DESTDIR)$(UNITDIR)/$$(basename "$$u"); \
	    chmod 0644 $(DESTDIR)$(UNITDIR)/$$(basename "$$u"); done

# ---- the FLARE launcher (integrations/flare: the Python package cjrelay_flare) ----
# PYTHON is the system's Python 3; PYTHONDIR is where it finds a package installed under
# PREFIX: on Debian /usr/lib/python3/dist-packages for /usr (its packages' directory) and
# /usr/local/lib/python3.X/dist-packages for /usr/local (where its pip installs); on another
# system, or for another PREFIX, the interpreter's own site-packages under PREFIX.
PYTHON    ?= $(firstword $(wildcard /usr/bin/python3) python3)
PYTHONDIR ?= $(shell $(PYTHON) -c 'import sys, sysconfig as s; p = sys.argv[1]; n = s.get_scheme_names(); \
    sch, base = ("deb_system", p) if p == "/usr" and "deb_system" in n else \
                ("posix_local", "/usr") if p == "/usr/local" and "posix_local" in n else ("posix_prefix", p); \
    print(s.get_path("purelib", sch, {"base": base, "platbase": base}))' $(PREFIX))
FLARE_SRC     := $(sort $(wildcard integrations/flare/pyproject.toml integrations/flare/README.md integrations/flare/LICENSE \
                   integrations/flare/cjrelay_flare/*.py integrations/flare/cjrelay_flare/comm_drivers/*.py))
FLARE_VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' integrations/flare/pyproject.toml)
FLARE_WHEEL   := $(B)/python/cjrelay_flare-$(FLARE_VERSION)-py3-none-any.whl

# Built from a copy of the package's files (setuptools writes build/ and *.egg-info beside
# its sources), with the setuptools and wheel already installed (no package index).
$(FLARE_WHEEL): $(FLARE_SRC)
	rm -rf $(B)/python && mkdir -p $(B)/python/src
	tar -cf - $(FLARE_SRC) | tar -xf - -C $(B)/python/src
	$(PYTHON) -m pip wheel -q --no-deps --no-build-isolation --no-index -w $(B)/python \
	    $(B)/python/src/integrations/flare

wheel: $(FLARE_WHEEL)

# The wheel unpacked into PYTHONDIR (a pure-Python wheel is its files and its .dist-info),
# the previous version's files first removed; byte-compiled when installing for real, as pip
# and Debian's py3compile do, left as sources in a staging DESTDIR.
install-flare: $(FLARE_WHEEL)
	@[ -n "$(PYTHONDIR)" ] || { echo "install-flare: PYTHONDIR is empty: is $(PYTHON) a Python 3?" >&2; exit 1; }
	install -d $(DESTDIR)$(PYTHONDIR)
	rm -rf $(DESTDIR)$(PYTHONDIR)/cjrelay_flare $(DESTDIR)$(PYTHONDIR)/cjrelay_flare-*.dist-info
	$(PYTHON) -m zipfile -e $(FLARE_WHEEL) $(DESTDIR)$(PYTHONDIR)/
	chmod -R u=rwX,go=rX $(DESTDIR)$(PYTHONDIR)/cjrelay_flare $(DESTDIR)$(PYTHONDIR)/cjrelay_flare-$(FLARE_VERSION).dist-info
	$(if $(DESTDIR),,$(PYTHON) -m compileall -q $(PYTHONDIR)/cjrelay_flare)
	@$(PYTHON) -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' $(PYTHONDIR) || \
	    echo "install-flare: $(PYTHONDIR) is not on $(PYTHON)'s path: set PYTHONPATH for the FLARE client" >&2

# The Debian packages cjrelay, cjrelay-tools and python3-cjrelay-flare (debian/):
# dpkg-buildpackage on a copy of the tree in build/deb/src, so its outputs (.deb, .changes,
# .buildinfo) land in build/deb/ and its clean step leaves this build/ alone; lintian checks
# them. The system's PATH, so that pybuild runs Debian's python3, not one a user's PATH
# (pyenv, a venv) puts first.
deb: deps
	rm -rf $(B)/deb && mkdir -p $(B)/deb/src
	tar -cf - --exclude=./$(B) --exclude=./.git . | tar -xf - -C $(B)/deb/src
	cd $(B)/deb/src && PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg-buildpackage -b -us -uc -j$(JOBS)
	lintian --fail-on error,warning $(B)/deb/*.changes

clean:
	rm -rf $(B)

# (build/deb holds the package build's own tree, sysusers.d directories included)
-include $(shell find $(B) -path $(B)/deb -prune -o -name '*.d' -type f -print 2>/dev/null)
