# rljail: `make demo` builds everything and runs an example in the jail;
# `make test` runs every test. Both install what they need on Debian/Ubuntu.

GO        ?= go
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
BIN       := bin/rljail
# A static pure-Go binary (no cgo, so no C library start on every run),
# linked by Go's own linker. Its ELF entry is jail/entry_amd64.s: it runs
# the init stage (C, without libc) before the Go runtime starts when the
# binary is re-executed as a jail's init, and prestarts one for a run.
GOFLAGS_STATIC := -trimpath -tags netgo,osusergo,urfave_cli_no_docs
LDFLAGS   := -s -w -X main.version=$(VERSION) -E rljail_entry
# The init stage as a relocation-free blob in a .syso (jail/stage/build.sh).
STAGE     := jail/zstage_linux_amd64.syso
STATICCHECK_VERSION := v0.8.2
# Debian packages, in three sets: what `make build` (and so `make install`)
# needs, what a run needs besides (the Python rootfs is built from the
# host's python3 and netbase), and what the tests need.
# gcc (with binutils) and libc6-dev's kernel headers build the init stage
# (jail/stage/build.sh); file checks that the binary is static.
BUILD_PACKAGES := gcc libc6-dev file
# python3 and netbase: the rootfs `make rootfs` and a first run build.
RUN_PACKAGES := python3 netbase
# The tests. qemu-system-x86 and busybox-static run the cgroup v2 tests in a
# VM (test-vm); debootstrap and cpio build the systemd VM's image
# (vm-systemd-image); libseccomp-dev the syscall table's check.
APT_PACKAGES := $(BUILD_PACKAGES) $(RUN_PACKAGES) libseccomp-dev bubblewrap qemu-system-x86 busybox-static debootstrap cpio
# libpython3.11-testsuite: CPython's regression tests compared bare and in
# the jail (integration/cpython_test.go).
APT_PACKAGES += libpython3.11-testsuite
# curl and xz-utils: AppArmor 4's parser, fetched once for test-apparmor.
APT_PACKAGES += curl xz-utils
# groff-base and man-db: the man page's check (rljail man rendered by groff
# -man -ww and man -l without a warning, cmd/rljail/man_test.go).
APT_PACKAGES += groff-base man-db
# The data rootfs of the data-stack tests (integration/datastack_test.go) is
# built from these Debian packages (rljail rootfs build --system-packages).
DATA_PACKAGES := python3-numpy python3-pandas python3-scipy python3-matplotlib python3-pytest python3-hypothesis
# The language rootfs of `rljail serve`'s other languages (integration/
# serve_languages_test.go, docs/api.md "Languages"): NAME=PACKAGES, built by
# `rljail rootfs build --name NAME --system-packages PACKAGES` (lang-rootfs).
LANG_ROOTFS := bash=bash node=nodejs gcc=g++
APT_PACKAGES += bash nodejs g++
# python3-pip and python3-venv: the --wheels and --venv tests (TestRootfsPackageSources).
APT_PACKAGES += $(DATA_PACKAGES) python3-pip python3-venv
# The conformance run (clients/python/conformance): the agent runtimes' own tests with
# Debian's pytest, and what rlm and smolagents import (DSPy also needs pydantic 2, which
# Debian 12 lacks: an interpreter that has it is found or named, CONFORMANCE_DSPY_PYTHON).
CONFORMANCE_PACKAGES := python3-pytest python3-pytest-asyncio python3-pytest-mock python3-rich python3-dotenv \
	python3-pil python3-jinja2 python3-requests python3-tqdm python3-diskcache python3-tenacity python3-anyio \
	python3-sniffio python3-cachetools
APT_PACKAGES += $(CONFORMANCE_PACKAGES)
# Where `make` puts the Python rootfs unless RLJAIL_ROOTFS says otherwise.
export RLJAIL_ROOTFS ?= $(if $(filter 0,$(shell id -u)),/var/lib/rljail/rootfs/python,$(HOME)/.local/share/rljail/rootfs/python)
# The data rootfs (numpy, pandas, scipy, matplotlib), beside the Python one.
export RLJAIL_DATA_ROOTFS ?= $(dir $(RLJAIL_ROOTFS))data

.PHONY: all build deps build-deps run-deps generate syscall-table rootfs data-rootfs lang-rootfs demo test unit python-test integration vet staticcheck bench bench-deps clean vm-kernel test-vm
.PHONY: install uninstall deb vm-systemd-image test-systemd-vm test-apparmor

# install: the binary, the systemd units and tmpfiles.d entry of contrib/,
# the AppArmor profile and the man page rljail.1, which `rljail man`
# generates from the binary's own flags (packaging/install.sh says where
# each goes).
# PREFIX, DESTDIR as usual; APPARMOR=auto puts the profile into
# /etc/apparmor.d only where AppArmor 4 is (/etc/apparmor.d/abi/4.0),
# yes or no decide instead.
PREFIX   ?= /usr/local
DESTDIR  ?=
APPARMOR ?= auto
# The .deb's version: the commit's time and id (a Debian version has no '-').
DEB_VERSION ?= 0~git$(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S 2>/dev/null).$(subst -,+,$(VERSION))
DEB_OUT     ?= build/deb

all: build

# deps installs the missing Debian packages of the tests (apt) once, build-deps
# those of the build alone, run-deps those a run needs too; nothing when all
# are present.
deps: PACKAGES = $(APT_PACKAGES)
build-deps: PACKAGES = $(BUILD_PACKAGES)
run-deps: PACKAGES = $(BUILD_PACKAGES) $(RUN_PACKAGES)
deps build-deps run-deps:
	@missing=""; for p in $(PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

# generate compiles the embedded seccomp profiles to BPF (profiles/precompiled.go).
generate: build-deps
	cd profiles && $(GO) run ./gen -out precompiled.go

# syscall-table rewrites seccomp/syscalls_table.go, the x86_64 call names,
# from libseccomp's table (cgo; the rljail binary itself does not link
# libseccomp). Its test fails when the committed table and libseccomp differ.
syscall-table: deps
	cd seccomp && CGO_ENABLED=1 $(GO) run ./internal/tablegen -out syscalls_table.go

$(STAGE): jail/stage/build.sh jail/stage/blob.ld jail/stage/*.c jail/stage/*.h
	jail/stage/build.sh $@

build: build-deps generate $(STAGE)
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_STATIC) -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rljail
	@file -L $(BIN) | grep -q 'statically linked' || { echo "$(BIN) is not statically linked"; exit 1; }
	@$(BIN) version >/dev/null || { echo "$(BIN) does not start (its entry, jail/entry_amd64.s, failed)"; exit 1; }

# rootfs builds the Python root filesystem once (rljail would on first use too),
# and again over one an older rljail built without the loader cache, /bin/sh,
# the time zone database, the common commands (timeout; busybox's applets), the
# network tables (/etc/services and /etc/protocols, rootfs/netbase.go) or ldconfig
# (ctypes.util.find_library, rootfs/ldconfig.go),
# one of an older format (info fails: format 2 added the per-file list and the
# fingerprint runs check), or one that changed since its build (verify fails:
# every run would refuse it).
rootfs: build run-deps
	@{ $(BIN) rootfs info 2>/dev/null | grep -q '^loader: *ld.so.cache' && $(BIN) rootfs verify >/dev/null 2>&1 && test -L "$(RLJAIL_ROOTFS)/usr/bin/sh" && \
	   { test -d "$(RLJAIL_ROOTFS)/usr/share/zoneinfo" || ! test -d /usr/share/zoneinfo; } && \
	   test -e "$(RLJAIL_ROOTFS)/usr/bin/timeout" && { test -e "$(RLJAIL_ROOTFS)/usr/bin/busybox" || ! test -x /bin/busybox; } && \
	   test -f "$(RLJAIL_ROOTFS)/usr/lib/rljail/services" && test -f "$(RLJAIL_ROOTFS)/usr/lib/rljail/protocols" && \
	   { test -e "$(RLJAIL_ROOTFS)/sbin/ldconfig" || ! test -x /sbin/ldconfig; }; } || $(BIN) rootfs build

# data-rootfs builds the data rootfs once, and again only when it is missing
# or its inputs changed: rljail's rootfs code (rootfs/*.go), the package
# list or an installed package's version (the stamp beside it records them).
DATA_STAMP = $(dir $(RLJAIL_DATA_ROOTFS)).$(notdir $(RLJAIL_DATA_ROOTFS)).stamp
data-rootfs: build deps
	@want=$$({ cat $$(ls rootfs/*.go | grep -v _test.go); echo $(DATA_PACKAGES); dpkg-query -W $(DATA_PACKAGES); } | sha256sum | cut -c1-64); \
	if $(BIN) rootfs verify --rootfs "$(RLJAIL_DATA_ROOTFS)" >/dev/null 2>&1 && [ "$$(cat "$(DATA_STAMP)" 2>/dev/null)" = "$$want" ]; then \
		echo "data rootfs $(RLJAIL_DATA_ROOTFS) is up to date"; \
	else \
		rm -f "$(DATA_STAMP)" && \
		$(BIN) rootfs build -q --rootfs "$(RLJAIL_DATA_ROOTFS)" --system-packages "$$(echo $(DATA_PACKAGES) | tr ' ' ,)" && \
		echo "$$want" > "$(DATA_STAMP)"; \
	fi

# lang-rootfs builds each of LANG_ROOTFS once beside the Python rootfs, and
# again only when it is missing or its inputs changed (as data-rootfs: a
# stamp of rljail's rootfs code and the packages' versions).
lang-rootfs: build deps
	@for spec in $(LANG_ROOTFS); do name=$${spec%%=*}; pkgs=$${spec#*=}; dir="$(dir $(RLJAIL_ROOTFS))$$name"; \
	  stamp="$(dir $(RLJAIL_ROOTFS)).$$name.stamp"; \
	  want=$$({ cat $$(ls rootfs/*.go | grep -v _test.go); echo $$pkgs; dpkg-query -W $$pkgs; } | sha256sum | cut -c1-64); \
	  if $(BIN) rootfs verify --rootfs "$$dir" >/dev/null 2>&1 && [ "$$(cat "$$stamp" 2>/dev/null)" = "$$want" ]; then \
	    echo "rootfs $$dir is up to date"; \
	  else \
	    rm -f "$$stamp" && start=$$(date +%s) && \
	    $(BIN) rootfs build -q --rootfs "$$dir" --system-packages "$$pkgs" && \
	    echo "$$want" > "$$stamp" && echo "built $$dir in $$(( $$(date +%s) - start ))s" || exit 1; \
	  fi; \
	done

demo: rootfs
	@echo '--- rljail -- python3 examples/demo.py'
	@$(BIN) --timeout 3s -- python3 examples/demo.py; echo "--- exit status $$?"

vet:
	$(GO) vet ./...
	$(GO) vet -tags rljailvm ./integration/vm/guest ./integration/
	$(GO) vet -tags rljailsystemd ./integration/vm/systemd

staticcheck:
	@test -x $$($(GO) env GOPATH)/bin/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$$($(GO) env GOPATH)/bin/staticcheck ./...
	$$($(GO) env GOPATH)/bin/staticcheck -tags rljailvm ./integration/vm/guest ./integration/
	$$($(GO) env GOPATH)/bin/staticcheck -tags rljailsystemd ./integration/vm/systemd

# The jail package links the init stage's .syso, so its tests need it.
unit: deps $(STAGE)
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /integration)

.PHONY: attack faults soak conformance

# attack runs only TestAttacks (integration/attack_test.go), verbosely, as
# root and rootless, then repeats its summary ("N passed, N failed" per
# group and in all, and each failed case) as the last lines; it exits
# non-zero when any attack got through.
attack: rootfs
	@log=$$(mktemp); \
	{ RLJAIL_BIN=$(CURDIR)/$(BIN) RLJAIL_ATTACK_SUMMARY=1 $(GO) test -count=1 -timeout 20m -run '^TestAttacks$$' -v ./integration/ 2>&1; \
	  echo $$? > $$log.rc; } | tee $$log; \
	rc=$$(cat $$log.rc); echo; \
	grep -E '^(attack suite: |  [a-z]+ +[0-9]+ passed|  FAILED )' $$log || echo "attack suite: no summary (the test binary failed before the end: exit $$rc)"; \
	rm -f $$log $$log.rc; exit $$rc

# faults: the supervisor SIGKILLed 100 times at random moments, and every
# setup failure (exit 125, one line, nothing left behind).
faults: rootfs
	RLJAIL_BIN=$(CURDIR)/$(BIN) RLJAIL_ATTACK_SUMMARY=1 $(GO) test -count=1 -timeout 20m -run '^TestFaults' -v ./integration/

# soak: 2,000 sequential runs and 500 eight at a time, then a leak check
# (about two minutes on two cores).
soak: rootfs
	RLJAIL_BIN=$(CURDIR)/$(BIN) RLJAIL_ATTACK_SUMMARY=1 $(GO) test -count=1 -timeout 30m -run '^TestSoak$$' -v ./integration/

# integration runs the black-box tests on this host (not ./integration/...,
# which would boot the VM a second time).
integration: rootfs data-rootfs lang-rootfs
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 40m ./integration/

# vm-kernel unpacks the /boot of Debian's linux-image-amd64 (the versioned
# package it depends on) into a cache: /var/cache/rljail-vm for root, else
# $$XDG_CACHE_HOME/rljail-vm, or $$RLJAIL_VM_CACHE. Downloads once (70 MB);
# nothing is installed into this machine's /boot.
vm-kernel: deps
	@sh integration/vm/fetch-kernel.sh

# test-vm boots Debian's kernel under qemu (software emulation) on a pure
# cgroup v2 hierarchy with the static rljail, the Python rootfs and the
# in-VM test binaries, and fails unless its verdict is PASS.
test-vm: rootfs vm-kernel
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m -v -skip '^TestSystemdVM$$' ./integration/vm/

# vm-systemd-image builds the systemd VM's Debian 12 root once with
# debootstrap from deb.debian.org into the VM cache (about 90 MB; rebuilt
# only when integration/vm/systemd/build-image.sh changes; the downloaded
# packages are kept there too).
vm-systemd-image: deps vm-kernel
	@sh integration/vm/systemd/build-image.sh

# test-systemd-vm boots that root with systemd as PID 1 under qemu and runs
# the cases of integration/vm/systemd in it: the .deb installed, upgraded
# and removed, the packaged runner service, systemd-run wrappers, the
# unprivileged user in a logind session, rljail's AppArmor profiles loaded
# into its kernel with AppArmor 4.1's parser (test-apparmor fetches it).
test-systemd-vm: rootfs vm-kernel vm-systemd-image test-apparmor
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m -v -run '^TestSystemdVM$$' ./integration/vm/

install: build
	sh packaging/install.sh --bin $(BIN) --prefix $(PREFIX) --apparmor $(APPARMOR) $(if $(DESTDIR),--destdir $(DESTDIR))

uninstall:
	sh packaging/install.sh --uninstall --prefix $(PREFIX) $(if $(DESTDIR),--destdir $(DESTDIR))

# deb builds $(DEB_OUT)/rljail_$(DEB_VERSION)_amd64.deb from the files of
# install (prefix /usr), reproducibly: the same commit gives the same bytes.
# test-apparmor parses contrib/apparmor/rljail with AppArmor 4's parser (Debian
# 13's, fetched once into the VM cache, never installed), which Debian 12 lacks.
test-apparmor: deps
	@sh packaging/apparmor-check.sh

deb: build
	@sh packaging/deb/build-deb.sh --bin $(BIN) --version '$(DEB_VERSION)' --out $(DEB_OUT)

# python-test: the Python package (clients/python) with the system python3: its unit
# suite against the TEST-ONLY fake session server, and its real-binary module against
# bin/rljail as root and rootless (as nobody); about 30 s, the three at once.
python-test: rootfs data-rootfs
	RLJAIL_BIN=$(CURDIR)/$(BIN) PYTHON=/usr/bin/python3 clients/python/test_all.sh

# conformance (part of test, about a minute): the Python adapters judged by the
# agent runtimes' own test suites (rlm, DSPy, smolagents), each run on the library's own executor and on rljail in the same
# run, one table per library (clients/python/conformance/run.py). THIRDPARTY names the
# directory of the libraries' snapshot archives (rlm-*.tar.gz...), which are not part of
# this repository; they are unpacked once into a cache (/var/cache/rljail-conformance
# for root, else $$XDG_CACHE_HOME/rljail-conformance; RLJAIL_CONFORMANCE_CACHE).
THIRDPARTY ?= $(RLJAIL_THIRDPARTY)
conformance: rootfs data-rootfs
	@test -n "$(THIRDPARTY)" && test -d "$(THIRDPARTY)" || { echo "make conformance: THIRDPARTY=DIR must name the directory of the runtimes' snapshots (rlm-*.tar.gz, dspy-*.tar.gz, smolagents-*.tar.gz)"; exit 2; }
	RLJAIL_BIN=$(CURDIR)/$(BIN) /usr/bin/python3 clients/python/conformance/run.py --thirdparty "$(THIRDPARTY)"

# conformance-in-test: make conformance where the runtimes' snapshots are given
# (RLJAIL_THIRDPARTY or THIRDPARTY=DIR: they are not part of the repository); where
# they are not, one line says that the conformance suite did not run, and why.
.PHONY: conformance-in-test
conformance-in-test:
	@if [ -n "$(THIRDPARTY)" ]; then $(MAKE) --no-print-directory conformance; \
	else echo "conformance: NOT RUN: RLJAIL_THIRDPARTY (or THIRDPARTY=DIR) does not name the runtimes' snapshots (rlm-*.tar.gz, dspy-*.tar.gz, smolagents-*.tar.gz), which are not part of the repository"; fi

test: build vet staticcheck unit python-test conformance-in-test test-apparmor integration test-vm test-systemd-vm

# bench: start-up of a jailed python3 -c pass and true against bare runs
# (the rootfs's own python3) and bubblewrap (ratios in the same run), and
# the cost of compiling a profile at run time (which embedded profiles
# avoid: they are compiled at build time), and rljail serve's warm pool
# against one-shot runs and bubblewrap. BenchmarkStartup also runs runc
# (what Docker uses) on an OCI bundle of the same rootfs. The last,
# BenchmarkStartupMatrix, is the summary of issue 33: rljail's overhead
# over bare against bubblewrap's and runc's for the default and the data
# rootfs, root and rootless, and the session figures, each against its
# target (fewer runs: each holds 28 starts).
bench: bench-deps rootfs data-rootfs
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench 'Startup$$|Session' -benchtime 300x -timeout 30m ./integration/
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench 'ImportNumpy' -benchtime 100x -timeout 30m ./integration/
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench Egress -benchtime 200x ./integration/
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench ServeWarm -benchtime 100x -timeout 20m ./integration/
	$(GO) test -run '^$$' -bench . -benchtime 200x ./seccomp/
	$(GO) test -run '^$$' -bench CLI -benchtime 500x ./cmd/rljail/
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench StartupMatrix -benchtime 60x -timeout 30m ./integration/

# bench-deps: runc for the bench's OCI row (Debian's package), only
# where it is missing; `make test` does not need it.
bench-deps:
	command -v runc >/dev/null || apt-get install -y runc

clean:
	rm -rf bin
