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
# Debian packages the build and the tests need.
# qemu-system-x86 and busybox-static run the cgroup v2 tests in a VM (test-vm).
# libpython3.11-testsuite and netbase: CPython's regression tests compared bare and in
# the jail (integration/cpython_test.go), and the /etc/services and /etc/protocols the
# rootfs copies.
APT_PACKAGES := gcc libc6-dev libseccomp-dev python3 file bubblewrap qemu-system-x86 busybox-static libpython3.11-testsuite netbase
# Where `make` puts the Python rootfs unless RLJAIL_ROOTFS says otherwise.
export RLJAIL_ROOTFS ?= $(if $(filter 0,$(shell id -u)),/var/lib/rljail/rootfs/python,$(HOME)/.local/share/rljail/rootfs/python)

.PHONY: all build deps generate syscall-table rootfs demo test unit python-test integration vet staticcheck bench clean vm-kernel test-vm

all: build

# deps installs missing Debian packages (apt) once; nothing when all are present.
deps:
	@missing=""; for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

# generate compiles the embedded seccomp profiles to BPF (profiles/precompiled.go).
generate: deps
	cd profiles && $(GO) run ./gen -out precompiled.go

# syscall-table rewrites seccomp/syscalls_table.go, the x86_64 call names,
# from libseccomp's table (cgo; the rljail binary itself does not link
# libseccomp). Its test fails when the committed table and libseccomp differ.
syscall-table: deps
	cd seccomp && CGO_ENABLED=1 $(GO) run ./internal/tablegen -out syscalls_table.go

$(STAGE): jail/stage/build.sh jail/stage/blob.ld jail/stage/*.c jail/stage/*.h
	jail/stage/build.sh $@

build: deps generate $(STAGE)
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_STATIC) -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rljail
	@file -L $(BIN) | grep -q 'statically linked' || { echo "$(BIN) is not statically linked"; exit 1; }
	@$(BIN) version >/dev/null || { echo "$(BIN) does not start (its entry, jail/entry_amd64.s, failed)"; exit 1; }

# rootfs builds the Python root filesystem once (rljail would on first use too),
# and again over one an older rljail built without the loader cache, /bin/sh,
# the time zone database, the common commands (timeout; busybox's applets), the
# network tables (/etc/services and /etc/protocols, rootfs/netbase.go) or ldconfig
# (ctypes.util.find_library, rootfs/ldconfig.go).
rootfs: build
	@{ $(BIN) rootfs info 2>/dev/null | grep -q '^loader: *ld.so.cache' && test -L "$(RLJAIL_ROOTFS)/usr/bin/sh" && \
	   { test -d "$(RLJAIL_ROOTFS)/usr/share/zoneinfo" || ! test -d /usr/share/zoneinfo; } && \
	   test -e "$(RLJAIL_ROOTFS)/usr/bin/timeout" && { test -e "$(RLJAIL_ROOTFS)/usr/bin/busybox" || ! test -x /bin/busybox; } && \
	   test -f "$(RLJAIL_ROOTFS)/usr/lib/rljail/services" && test -f "$(RLJAIL_ROOTFS)/usr/lib/rljail/protocols" && \
	   { test -e "$(RLJAIL_ROOTFS)/sbin/ldconfig" || ! test -x /sbin/ldconfig; }; } || $(BIN) rootfs build

demo: rootfs
	@echo '--- rljail -- python3 examples/demo.py'
	@$(BIN) --timeout 3s -- python3 examples/demo.py; echo "--- exit status $$?"

vet:
	$(GO) vet ./...
	$(GO) vet -tags rljailvm ./integration/vm/guest ./integration/

staticcheck:
	@test -x $$($(GO) env GOPATH)/bin/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$$($(GO) env GOPATH)/bin/staticcheck ./...
	$$($(GO) env GOPATH)/bin/staticcheck -tags rljailvm ./integration/vm/guest ./integration/

# The jail package links the init stage's .syso, so its tests need it.
unit: deps $(STAGE)
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /integration)

.PHONY: attack faults soak

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
integration: rootfs
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 30m ./integration/

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
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 20m -v ./integration/vm/

# python-test: the Python package (clients/python) with the system python3: its unit
# suite against the TEST-ONLY fake session server, and its real-binary module against
# bin/rljail as root and rootless (as nobody); about 30 s, the three at once.
python-test: rootfs
	RLJAIL_BIN=$(CURDIR)/$(BIN) PYTHON=/usr/bin/python3 clients/python/test_all.sh

test: build vet staticcheck unit python-test integration test-vm

# bench: start-up of a jailed python3 -c pass and true against bare runs
# (the rootfs's own python3) and bubblewrap (ratios in the same run), and
# the cost of compiling a profile at run time (which embedded profiles
# avoid: they are compiled at build time).
bench: rootfs
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench 'Startup|Session' -benchtime 300x -timeout 30m ./integration/
	RLJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench Egress -benchtime 200x ./integration/
	$(GO) test -run '^$$' -bench . -benchtime 200x ./seccomp/
	$(GO) test -run '^$$' -bench CLI -benchtime 500x ./cmd/rljail/

clean:
	rm -rf bin
