# kiln - offline model toolchain. See README.md.
#
#   make            build/kiln and build/libkiln.a
#   make test       every cmocka suite and end-to-end test, one summary line
#   make check      the same tests under ASan + UBSan (in build-san/)
#   make fuzz       every parser under libFuzzer (FUZZ_SECONDS each)
#   make bench      benchmarks; with LLAMA_CPP=DIR, llama.cpp side by side
#   make demo       a small model written by kiln, run through every tool
#   make install PREFIX=/usr/local ; make clean

BUILD   ?= build
PREFIX  ?= /usr/local
CC      ?= cc
PKGS    := libzstd libarchive jansson libpcre2-8 cmocka

OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
# `override` keeps these even when CFLAGS is given on the command line.
# -ffp-contract=off (also implied by -std=c11) stops gcc from fusing a*b+c
# into FMA inside AVX-512 code: the codecs rely on it to reproduce ggml's
# bytes exactly and to keep every SIMD path equal to the scalar one.
# -Werror with -Wshadow, -Wmissing-prototypes, -Wstrict-prototypes and
# -Wformat=2: every build, CI's included, fails on any warning.
override CFLAGS += -std=c11 -D_GNU_SOURCE -ffp-contract=off -Wall -Wextra -Wno-unused-parameter \
	-Werror -Wshadow -Wmissing-prototypes -Wstrict-prototypes -Wformat=2 -fopenmp -MMD -MP
override LDLIBS += -fopenmp -lm

# The library's layers, bottom first. A folder's library files include only
# folders listed before it (tests/e2e/layers.sh checks this on every
# `make test`); the cmd_*.c files are the CLI layer on top of all of them and
# are linked into build/kiln only, never into libkiln.a.
#   core       files, GGUF/safetensors, errors, types, hashing, imatrix files
#   codec      ggml block formats: quantize and dequantize one row
#   tokenizer  llama.cpp's tokenizers over a GGUF vocabulary
#   testmodel  synthetic HF checkpoints for tests, demo and bench
#   convert    HF safetensors -> GGUF
#   inspect    model views, inspect and diff
#   runtime    the forward pass and its product kernels
#   golden     logits files, perplexity, KLD, golden gates
#   imatrix    importance-matrix collection
#   quantize   model quantization: type policy and the pipeline
#   splice     byte-level tensor and expert mixing
LIBDIRS := core codec tokenizer testmodel convert inspect runtime golden imatrix quantize splice
ALL_SRC := $(foreach d,$(LIBDIRS),$(wildcard $(d)/*.c))
CMD_SRC := $(wildcard cli/*.c) $(foreach d,$(LIBDIRS),$(wildcard $(d)/cmd_*.c))
LIB_SRC := $(filter-out $(CMD_SRC),$(ALL_SRC))
TEST_SRC := $(wildcard tests/test_*.c)
BENCH_SRC := $(wildcard bench/bench_*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CMD_OBJ  := $(CMD_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

DEPS_STAMP := $(BUILD)/.deps-ok

.PHONY: all test check bench demo install clean deps fuzz
all: $(BUILD)/kiln $(BUILD)/libkiln.a

# Installs missing Debian packages once per build folder (scripts/deps.sh
# checks each package with dpkg and installs only what is missing).
$(DEPS_STAMP): scripts/deps.sh
	@mkdir -p $(BUILD)
	@./scripts/deps.sh
	@touch $@
deps: $(DEPS_STAMP)

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs libzstd libarchive jansson libpcre2-8 2>/dev/null) -lunistring
CMOCKA_LIBS = $(shell pkg-config --libs cmocka 2>/dev/null)

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -c $< -o $@

$(BUILD)/libkiln.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/kiln: $(CMD_OBJ) $(BUILD)/libkiln.a
	$(CC) $(CFLAGS) -o $@ $(CMD_OBJ) $(BUILD)/libkiln.a $(PKG_LIBS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libkiln.a | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(BUILD)/libkiln.a $(PKG_LIBS) $(CMOCKA_LIBS) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libkiln.a | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ $< $(BUILD)/libkiln.a $(PKG_LIBS) $(LDLIBS)

test: all $(TEST_BIN)
	@./tests/run.sh $(BUILD)

# make check: the whole suite under ASan + UBSan, in build-san/. Any
# sanitizer report fails the run: UBSan does not recover, and with
# abort_on_error ASan, UBSan and LeakSanitizer all end in SIGABRT, which a
# cmocka suite reports as a crash and an end-to-end case that expects kiln
# to fail reports as a crash too (their plain exit code, 1, would pass there).
# Time: the sanitized suites run 1.2-4.2x slower than -O2 (test_forward
# 2.6x, e2e/golden 4.2x, kernel suites 1.2-2x), so the full suite (~12 min
# for make test) takes ~35-50 min: with the build and make test, CI stays
# within its 90 minutes on 2 cores. Should it not, `make check
# KILN_TEST_LIGHT=1` has the forward-pass suites check fewer fixtures
# (tests/shared.h).
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
KILN_TEST_LIGHT ?= 0
SAN_ENV := ASAN_OPTIONS=abort_on_error=1 UBSAN_OPTIONS=abort_on_error=1:print_stacktrace=1 \
	KILN_TEST_LIGHT=$(KILN_TEST_LIGHT)
check:
	@$(SAN_ENV) $(MAKE) --no-print-directory BUILD=build-san CFLAGS="-O1 -g $(SAN)" LDLIBS="$(SAN)" test

bench: all $(BENCH_BIN)
	@./bench/run.sh $(BUILD)

demo: all
	@./scripts/demo.sh $(BUILD)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib
	install -m 755 $(BUILD)/kiln $(DESTDIR)$(PREFIX)/bin/kiln
	install -m 644 $(BUILD)/libkiln.a $(DESTDIR)$(PREFIX)/lib/libkiln.a

clean:
	rm -rf build build-san build-fuzz

-include $(LIB_OBJ:.o=.d) $(CMD_OBJ:.o=.d)

# ---- fuzzing: make fuzz [FUZZ_SECONDS=60] --------------------------------
# libFuzzer harnesses for every parser of untrusted input (fuzz/README.md).
# The library is rebuilt with clang and the sanitizers in $(FUZZ_BUILD)/,
# apart from the normal build; each harness then runs FUZZ_SECONDS from
# its seed corpus fuzz/corpus/NAME/. tests/test_fuzz_regress links the same
# harnesses, built with $(CC), and replays fuzz/regress/ and fuzz/corpus/.
FUZZ_SECONDS ?= 60
FUZZ_BUILD   ?= build-fuzz
FUZZ_CC      ?= clang
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_SRC     := $(wildcard fuzz/fuzz_*.c)
FUZZ_NAMES   := $(filter-out common,$(FUZZ_SRC:fuzz/fuzz_%.c=%))

.PHONY: fuzz-bins
fuzz:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) LDLIBS="$(FUZZ_SAN)" \
	    CFLAGS="-O1 -g $(FUZZ_SAN) -fsanitize=fuzzer-no-link" fuzz-bins
	@./fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_NAMES)

fuzz-bins: $(FUZZ_NAMES:%=$(BUILD)/fuzz/fuzz_%)

$(BUILD)/fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_common.c fuzz/fuzz.h $(BUILD)/libkiln.a | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -DKILN_LIBFUZZER -fsanitize=fuzzer -o $@ $< fuzz/fuzz_common.c \
	    $(BUILD)/libkiln.a $(PKG_LIBS) $(LDLIBS)

$(BUILD)/tests/test_fuzz_regress: tests/test_fuzz_regress.c $(FUZZ_SRC) fuzz/fuzz.h fuzz/harnesses.h \
                                  $(BUILD)/libkiln.a | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -o $@ tests/test_fuzz_regress.c $(FUZZ_SRC) $(BUILD)/libkiln.a \
	    $(PKG_LIBS) $(LDLIBS)
# ---- end of fuzzing ------------------------------------------------------
