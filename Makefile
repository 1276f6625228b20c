# attnctl — build, test, install.  `make check` on a fresh Debian 12 installs
# what it needs (apt-get, with sudo when not root), builds and runs the tests.

PREFIX  ?= /usr/local
DESTDIR ?=
BUILD   ?= build
CC      ?= cc

# Debian packages the build and the tests need; installed when missing.
DEB_BUILD_PKGS := gcc make pkg-config libcjson-dev libcsv-dev check libsubunit-dev \
                  libutf8proc-dev zlib1g-dev libopenblas-dev nettle-dev
# Open MPI: data-parallel training (mpirun -np N attnctl train). Optional: a
# machine without mpicc builds attnctl without the MPI plugin.
DEB_MPI_PKGS   := libopenmpi-dev openmpi-bin
DEB_CHECK_PKGS := $(DEB_BUILD_PKGS) $(DEB_MPI_PKGS) python3 python3-numpy valgrind groff-base chromium
DEB_CLANG_PKGS := clang libomp-dev libclang-rt-14-dev libfuzzer-14-dev

WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wno-psabi
OPT      ?= -O3 -march=native
CPPFLAGS += -Iinclude -D_GNU_SOURCE
CFLAGS   ?=
CFLAGS   += -std=c11 $(WARN) $(OPT) -ffp-contract=fast -fopenmp -g
# Nettle (SHA-256 of training files) is linked statically: loaded as a shared
# library its start-up CPU detection cost every command, a one-review
# predict included, about 0.1 ms; the archive links only the hash.
LDLIBS   := -lcjson -lcsv -lutf8proc -lz -lopenblas -Wl,-Bstatic -lnettle -Wl,-Bdynamic -lm
# attnctl itself loads OpenBLAS with dlopen (src/nn/openblas_loader.c); the tests link it.
BIN_LDLIBS := $(filter-out -lopenblas,$(LDLIBS))
CHECK_LIBS := -lcheck_pic -lsubunit -lrt -pthread -lm

ifeq ($(SAN),1)
CFLAGS  += -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=undefined,float-cast-overflow
LDFLAGS += -fsanitize=address,undefined
endif

# The OpenBLAS loader defines cblas_sgemm for attnctl alone: in the library
# archive it would stand in for OpenBLAS's own in the tests too.
BLAS_LOADER := src/nn/openblas_loader.c
NN_SRCS   := $(filter-out $(BLAS_LOADER),$(sort $(wildcard src/nn/*.c)))
TEXT_SRCS := $(sort $(wildcard src/text/*.c))
IO_SRCS   := $(sort $(wildcard src/io/*.c))
UTIL_SRCS := $(sort $(wildcard src/util/*.c))
TRAIN_SRCS := $(sort $(wildcard src/train/*.c))
CLI_SRCS  := $(sort $(wildcard src/cli/*.c))
LIB_SRCS  := $(UTIL_SRCS) $(NN_SRCS) $(TEXT_SRCS) $(IO_SRCS) $(TRAIN_SRCS)

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))
NN_OBJS   := $(call obj,$(NN_SRCS))
TEXT_OBJS := $(call obj,$(TEXT_SRCS))
IO_OBJS   := $(call obj,$(IO_SRCS))
UTIL_OBJS := $(call obj,$(UTIL_SRCS))
CLI_OBJS  := $(call obj,$(CLI_SRCS))
LIB_OBJS  := $(call obj,$(LIB_SRCS))

LIB := $(BUILD)/libattnctl.a
BIN := $(BUILD)/attnctl
# The MPI plugin, loaded by attnctl only under mpirun (src/cli/parallel.c):
# built when mpicc is there when the rule runs (not when make starts: the
# deps rule may have just installed it). OMPI_CC makes the wrapper use $(CC).
MPICC  ?= mpicc
PLUGIN := $(BUILD)/attnctl-mpi.so

TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
DEPS_STAMP := $(BUILD)/.deps-ok
BUILD_DEPS_STAMP := $(BUILD)/.build-deps-ok

.PHONY: all deps deps-clang check asan clang bench demo demo-full install uninstall clean fuzz
.DEFAULT_GOAL := all

all: attnctl

attnctl: $(BIN) $(PLUGIN)
	cp $(BIN) attnctl
	@if [ -f $(PLUGIN) ]; then cp $(PLUGIN) attnctl-mpi.so; fi

# ---- Debian packages -------------------------------------------------------
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
define install_missing
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:$$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	fi
endef

# Building (and so `make demo`) needs the build and MPI packages only; the
# tests need the rest too (valgrind, chromium, ...).
$(BUILD_DEPS_STAMP):
	$(call install_missing,$(DEB_BUILD_PKGS) $(DEB_MPI_PKGS))
	@mkdir -p $(BUILD) && touch $@

$(DEPS_STAMP): | $(BUILD_DEPS_STAMP)
	$(call install_missing,$(DEB_CHECK_PKGS))
	@mkdir -p $(BUILD) && touch $@

deps: $(DEPS_STAMP)

deps-clang: $(DEPS_STAMP)
	$(call install_missing,$(DEB_CLANG_PKGS))

# ---- build -----------------------------------------------------------------
$(BUILD)/%.o: %.c | $(BUILD_DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(CLI_OBJS) $(call obj,$(BLAS_LOADER)) $(LIB)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(CLI_OBJS) $(call obj,$(BLAS_LOADER)) $(LIB) $(BIN_LDLIBS)

# No sanitizer in the plugin: it is loaded into a sanitized attnctl as a plain library.
$(BUILD)/attnctl-mpi.so: src/mpi/comm_mpi.c include/attnctl/comm.h | $(BUILD_DEPS_STAMP)
	@mkdir -p $(dir $@)
	@if command -v $(MPICC) >/dev/null 2>&1; then \
	  echo "OMPI_CC=$(CC) $(MPICC) $(CPPFLAGS) -std=c11 $(WARN) -O2 -g -fPIC -shared -o $@ $<"; \
	  OMPI_CC=$(CC) $(MPICC) $(CPPFLAGS) -std=c11 $(WARN) -O2 -g -fPIC -shared -o $@ $<; \
	else \
	  echo "note: no $(MPICC): attnctl is built without its MPI plugin (no mpirun training)"; \
	fi

$(BUILD)/tests/%: tests/%.c $(LIB) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -MMD -MP -o $@ $< $(LIB) $(LDLIBS) $(CHECK_LIBS)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ---- tests -----------------------------------------------------------------
# Each Check suite prints its own summary; tests/run.sh sums them up and
# fails when any suite fails.
# After the suites, `make check` fuzzes every parser a little and runs the
# end-to-end flow under valgrind; `make asan` and `make clang` run the suites only.
CHECK_EXTRAS ?= fuzz-check valgrind-check
check: $(TEST_BINS) $(BIN) $(PLUGIN) | $(DEPS_STAMP)
	@ATTNCTL=$(abspath $(BIN)) BUILD=$(BUILD) sh tests/run.sh $(TEST_BINS)
	@sh tests/file_graph.sh $(LIB_OBJS) $(CLI_OBJS)
	@MPI_TIMED=$(if $(filter 1,$(SAN)),0,1) sh tests/mpi_check.sh $(abspath $(BIN))
	@for t in $(CHECK_EXTRAS); do $(MAKE) --no-print-directory $$t || exit 1; done

asan:
	$(MAKE) BUILD=build/asan SAN=1 OPT='-O1 -march=native' CHECK_EXTRAS= check

clang: deps-clang
	$(MAKE) BUILD=build/clang CC=clang CHECK_EXTRAS= check

# ---- valgrind --------------------------------------------------------------
# The end-to-end flow (tests/valgrind.sh) under memcheck. Valgrind 3.19 cannot
# run AVX-512 code, so this binary is built for x86-64-v3 (AVX2) in its own
# directory.
VALGRIND_BUILD ?= build/valgrind
.PHONY: valgrind-check
valgrind-check: $(DEPS_STAMP)
	@$(MAKE) --no-print-directory BUILD=$(VALGRIND_BUILD) OPT='-O1 -march=x86-64-v3' \
	    $(VALGRIND_BUILD)/attnctl
	@sh tests/valgrind.sh $(VALGRIND_BUILD)/attnctl $(VALGRIND_BUILD)/work

# ---- fuzzing ---------------------------------------------------------------
# libFuzzer targets (tests/fuzz/fuzz_*.c) linked against the library built by
# clang with coverage instrumentation, ASan and UBSan, in its own directory.
# `make fuzz` runs each target FUZZ_SECONDS (one after the other, one process
# each); `make fuzz-check` is the short run for `make check` (0 skips it).
# New inputs go to $(FUZZ_BUILD)/corpus; tests/fuzz/corpus/ is only read.
# -march=native as in the normal build, so the same vector code (src/nn/simd.h) runs.
FUZZ_BUILD         ?= build/fuzz
FUZZ_CC            ?= clang
FUZZ_SECONDS       ?= 180
FUZZ_CHECK_SECONDS ?= 20
FUZZ_TARGETS := csv tokenizer config safetensors vocab predict quantized
FUZZ_CFLAGS  := -std=c11 $(WARN) -O1 -march=native -g -fopenmp -fno-omit-frame-pointer \
                -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_LIB_OBJS := $(patsubst %.c,$(FUZZ_BUILD)/%.o,$(LIB_SRCS))
FUZZ_LIB  := $(FUZZ_BUILD)/libattnctl.a
FUZZ_BINS := $(addprefix $(FUZZ_BUILD)/fuzz_,$(FUZZ_TARGETS))

.PHONY: fuzz-build fuzz-check

$(FUZZ_BUILD)/src/%.o: src/%.c | deps-clang
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_LIB): $(FUZZ_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h $(FUZZ_LIB) | deps-clang
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB) $(LDLIBS)

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	@sh tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

ifeq ($(FUZZ_CHECK_SECONDS),0)
fuzz-check:
	@echo "fuzz-check: skipped (FUZZ_CHECK_SECONDS=0)"
else
fuzz-check: fuzz-build
	@sh tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_CHECK_SECONDS) $(FUZZ_TARGETS)
endif

ifeq ($(filter $(BUILD)/%,$(FUZZ_BUILD)),)
-include $(shell find $(FUZZ_BUILD) -name '*.d' 2>/dev/null)
endif
# ---- end of fuzzing --------------------------------------------------------

bench: $(BIN)
	$(BIN) bench --config models/bench-a.json --batch-size 32 --threads 2
	@if [ -f ../shared/data/imdb/train.csv.gz ]; then $(BIN) bench --data ../shared/data/imdb/train.csv.gz --steps 0; fi

demo: $(BIN)
	@sh data/demo.sh $(BIN)

demo-full: $(BIN)
	@sh data/demo.sh --full $(BIN)

install: $(BIN) $(PLUGIN)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/attnctl
	if [ -f $(PLUGIN) ]; then install -d $(DESTDIR)$(PREFIX)/lib/attnctl && \
	    install -m 644 $(PLUGIN) $(DESTDIR)$(PREFIX)/lib/attnctl/attnctl-mpi.so; fi
	install -m 644 attnctl.1 $(DESTDIR)$(PREFIX)/share/man/man1/attnctl.1

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/attnctl $(DESTDIR)$(PREFIX)/share/man/man1/attnctl.1
	rm -rf $(DESTDIR)$(PREFIX)/lib/attnctl

clean:
	rm -rf build attnctl attnctl-mpi.so
