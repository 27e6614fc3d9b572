# mt: a minimal Transformer training framework in C.
#   make            library (build/libmt.a) and programs (./train, ./infer, ./preview, ./export)
#   make test       every test; ends with "N passed, N failed"
#   make test-fast  the edit-compile-test loop's tier (under 2 minutes): make test without SLOW_TESTS
#   make test-toolchains  the build and a smoke subset of the tests with GCC 11 and clang 14
#   make asan       the tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   make bench      benchmarks against PyTorch on this machine
#   make valgrind   the C tests under valgrind memcheck (build-valgrind/)
#   make depth-study  the depth study (docs/depth-study.md, ~50 min; -quick: ~6 min; -1000: 1000 layers)
#   make fuzz       libFuzzer targets (tests/fuzz/fuzz_*.c) under ASan + UBSan, FUZZ_SECONDS each
#   make check-links  every relative link and image of README.md, docs/ and bench/*.md resolves
#   make deps       installs the Debian packages mt needs (deps-test: also those of the tests)
#   make deps-llamacpp  npm's node-llama-cpp (llama.cpp's CPU build) into build-node/, for the GGUF test
#   make deps-browser   npm's playwright-core into build-node/, for the browser test of the report
#   make clean
# PORTABLE=1 builds for any x86-64 CPU (the baseline: SSE2) instead of -march=native.
# MPI=1 builds with mpicc into build-mpi/ (./build-mpi/train runs under mpirun; docs/mpi.md).

MPI      ?= 0
# CROSS=aarch64 builds with the cross compiler aarch64-linux-gnu-gcc into build-aarch64/ (make
# deps-cross installs it and the arm64 libraries; make test-aarch64 runs the tests under qemu).
CROSS    ?=
ifeq ($(MPI),1)
BUILD    ?= build-mpi
CC       := mpicc
MPI_FLAGS := -DMT_MPI
else ifneq ($(CROSS),)
BUILD    ?= build-$(CROSS)
CC       := $(CROSS)-linux-gnu-gcc
else
BUILD    ?= build
CC       := gcc
endif
PORTABLE ?= 0
OPT      ?= -O3
# the libraries of the compiler's target (x86_64-linux-gnu, aarch64-linux-gnu: Debian's multiarch)
TRIPLET  := $(shell $(CC) -print-multiarch 2>/dev/null)
BLAS_DIR := /usr/lib/$(TRIPLET)/openblas-openmp
BLAS_INC := /usr/include/$(TRIPLET)/openblas-openmp

# oneDNN (libdnnl-dev) when the target's library is present: the GEMM layer's second backend and
# bf16. DNNL=0 builds without it (OpenBLAS only; --precision bf16 is refused).
DNNL ?= $(if $(wildcard /usr/lib/$(TRIPLET)/libdnnl.so),1,0)
ifeq ($(DNNL),1)
DNNL_FLAGS := -DMT_DNNL
DNNL_LIB   := -ldnnl
endif

# ARCH: the build's instruction sets. aarch64: -march=native where it runs, else (a cross build)
# ARMv8-A with the CRC extension (every aarch64 server and the Raspberry Pi 3 and later have it).
ifneq ($(filter aarch64-%,$(TRIPLET)),)
ifeq ($(PORTABLE)$(CROSS),0)
ARCH := -march=native
else
ARCH := -march=armv8-a+crc
endif
else ifeq ($(PORTABLE),1)
ARCH := -march=x86-64 -mtune=generic
else
ARCH := -march=native
endif

# -fno-math-errno: sqrtf vectorises (mt never reads errno); -fno-trapping-math: loops with selects
# (the activations, norms, softmax) vectorise without AVX-512's masked operations, on AVX2 too
# (mt never reads the floating-point exception flags; the values are the same)
CFLAGS  := -std=c11 -D_GNU_SOURCE $(OPT) $(ARCH) -fno-math-errno -fno-trapping-math -g -fopenmp -Wall -Wextra -Isrc \
           -I$(BLAS_INC) -MMD -MP $(MPI_FLAGS) $(DNNL_FLAGS) $(EXTRA_CFLAGS)
# rpath: always the OpenMP build of OpenBLAS, whatever the system's libblas alternative says
LDFLAGS := -fopenmp -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -Wl,-u,mt_cpu_check $(EXTRA_LDFLAGS)
LDLIBS  := -lopenblas $(DNNL_LIB) -lcjson -lstb -lz -lm

SRC     := $(shell find src -name '*.c' | sort)
# scripts/report.html, built in as a C array (mt_report_template: ./train --report's page is the
# one scripts/plot-runs --html fills)
PAGE    := gen/report_page
OBJ     := $(SRC:%.c=$(BUILD)/%.o) $(BUILD)/$(PAGE).o
LIB     := $(BUILD)/libmt.a
PROGS   := $(basename $(wildcard train.c infer.c preview.c export.c))
TESTS   := $(patsubst %.c,$(BUILD)/%,$(wildcard tests/test_*.c))
DRIVERS := $(patsubst %.c,$(BUILD)/%,$(wildcard tests/parity/*_driver.c))
TESTLIB := $(BUILD)/tests/check.o
BENCHES := $(patsubst %.c,$(BUILD)/%,$(wildcard bench/*.c))
# the methods of mt's enum tables, read by the parity twins, benchmarks and scripts (a cross
# build's is written under qemu by tests/qemu.sh)
METHODS := $(BUILD)/scripts/methods $(if $(CROSS),,$(BUILD)/methods.json)

# dataset-fashion-mnist: the full Fashion-MNIST in /usr/share/datasets/fashion-mnist (image docs);
# festlex-cmu: CMUdict in /usr/share/festival/dicts/cmu (the encoder-decoder's G2P task);
# libdnnl-dev: oneDNN, the GEMM layer's second backend and --precision bf16;
# dict-gcide: the GNU dictionary of English, a 30 MB corpus (scripts/gcide_text.py, docs/scale.md);
# libjs-chart.js: the chart library scripts/plot-runs --html inlines into its page
DEPS_RUN  := build-essential libopenblas-openmp-dev libopenblas0-openmp libstb-dev libcjson-dev \
             zlib1g-dev gnuplot-nox dataset-fashion-mnist festlex-cmu libdnnl-dev dict-gcide \
             libjs-chart.js
# make MPI=1 (and the MPI tests, tests/test_mpi.sh; iproute2: test_mpi_net.sh's namespaces)
DEPS_MPI  := libopenmpi-dev openmpi-bin iproute2
# qemu-user: qemu-x86_64 runs the builds on older CPU models (tests/test_cpu_check.sh);
# chromium: the browser tests/test_report_html.sh opens the report in (with npm's playwright-core);
# python3-sentencepiece: the reference tests/test_sp_hf.sh encodes Llama 2's tokenizer.model with
DEPS_TEST := python3-torch python3-numpy clang gcc-11 clang-format libclang-rt-14-dev libomp-14-dev valgrind \
             qemu-user chromium python3-sentencepiece $(DEPS_MPI)

.PHONY: all test test-fast test-toolchains test-aarch64 qemu-test deps-cross deps-llamacpp deps-browser asan valgrind valgrind-run bench fuzz deps deps-test clean depth-study depth-study-quick depth-study-1000 \
        check-links
all: $(LIB) $(PROGS:%=$(BUILD)/%) $(if $(filter build,$(BUILD)),$(PROGS)) $(METHODS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/$(PAGE).c: scripts/report.html
	@mkdir -p $(dir $@)
	{ echo 'const char mt_report_template[] = {'; od -An -v -tx1 $< | sed 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '0};'; } >$@

$(BUILD)/$(PAGE).o: $(BUILD)/$(PAGE).c
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# src/tensor/cpu_check.c, compiled for the x86-64 baseline, refuses to start on a CPU without an
# instruction set of the build's ARCH; $(BUILD)/cpu_needs.h lists them, oldest first, of those
# that __builtin_cpu_supports names.
CPU_SETS := ssse3 sse4.1 sse4.2 popcnt avx avx2 fma bmi bmi2 avx512f avx512cd avx512bw avx512dq \
            avx512vl avx512ifma avx512vbmi avx512vbmi2 avx512vnni avx512bitalg avx512vpopcntdq \
            avx512bf16
ifneq ($(filter x86_64-%,$(shell $(CC) -dumpmachine)),)
$(BUILD)/cpu_needs.h: Makefile
	@mkdir -p $(dir $@)
	@macros=$$($(CC) $(ARCH) -dM -E -x c /dev/null); printf '#define MT_CPU_NEEDS' >$@; \
	for s in $(CPU_SETS); do m=__$$(echo $$s | tr a-z. A-Z_)__; \
	  echo "$$macros" | grep -q "^#define $$m 1$$" && printf ' X("%s")' $$s >>$@; done; echo >>$@
$(BUILD)/src/tensor/cpu_check.o: $(BUILD)/cpu_needs.h
$(BUILD)/src/tensor/cpu_check.o: CFLAGS += -march=x86-64 -mtune=generic -I$(BUILD)
endif

$(PROGS:%=$(BUILD)/%): $(BUILD)/%: %.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/tests/test_%: tests/test_%.c $(TESTLIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(TESTLIB) $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/tests/parity/%_driver: tests/parity/%_driver.c $(TESTLIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(TESTLIB) $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/scripts/methods: scripts/methods.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@
$(BUILD)/methods.json: $(BUILD)/scripts/methods
	$< >$@

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

# cp -f unlinks a program that is running (a training while make rebuilds) and copies anew
$(PROGS): %: $(BUILD)/%
	cp -f $< $@

# (tests/test_speedrun.sh runs bench/speedrun.sh, which needs the two benches)
test: all $(TESTS) $(DRIVERS) $(BUILD)/bench/sgemm $(BUILD)/bench/gpt
	@MT_BUILD=$(BUILD) sh tests/run.sh $(TESTS)

# make test-fast runs every test but these (the tier is sized by the CPU seconds tests/run.sh
# prints, to stay well under 2 minutes on 2 idle cores): fuzzing, MPI (a second build), the
# depth studies' smoke runs, the kill-and-resume loops (grad_accum, reliability), the scale and
# encoder-decoder depth scripts, the old CPUs under qemu (a third build); recompute's every norm
# x placement, the step's allocation count, plot-runs and its page in Chromium, the optimizers
# end to end (test_optim stays), the speedrun, and the parity of the exports, BPE, bf16 and the
# ViT. Every module keeps its C test (test_<module>.c: tensor, ops, nn, norms, optim, data, bpe,
# io, models, tasks, ckpt, train, diag, app), the programs their shell tests, and the GPT,
# encoder-decoder, nGPT, ops, norms, optimizer and score twins stay.
SLOW_TESTS := test_fuzz.sh test_mpi.sh test_mpi_net.sh test_zero.sh test_depth_study3.sh \
              test_depth_study4.sh \
              test_grad_accum.sh test_reliability.sh test_scale.sh test_encdec_depth.sh \
              test_cpu_check.sh test_recompute test_steady test_plot_runs.sh test_cli_optim.sh \
              test_export.py test_bpe.py test_bf16.py test_vit.py \
              test_import_gguf.sh test_import_llmc.sh test_report_html.sh test_sft.sh \
              test_import_hf.sh test_speedrun.sh
test-fast: all $(TESTS) $(DRIVERS)
	@MT_BUILD=$(BUILD) MT_LEAVE_OUT="$(SLOW_TESTS)" sh tests/run.sh $(TESTS)

# make test-aarch64: the cross build (CROSS=aarch64, build-aarch64/) and make test-fast's tier of
# its tests under qemu-aarch64 (tests/qemu.sh; the whole suite emulated takes hours: make
# CROSS=aarch64 qemu-test runs every test); skips with a message where the cross tools are absent
# (make deps-cross installs them).
test-aarch64:
	@if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null && \
	  [ -e /usr/lib/aarch64-linux-gnu/openblas-openmp ]; then \
	  $(MAKE) CROSS=aarch64 MT_LEAVE_OUT="$(SLOW_TESTS)" qemu-test; \
	else echo "test-aarch64: SKIPPED (needs aarch64-linux-gnu-gcc, qemu-aarch64 and the arm64" \
	  "libraries: make deps-cross)"; fi
qemu-test: all $(TESTS) $(DRIVERS)
	@MT_LEAVE_OUT="$(MT_LEAVE_OUT)" sh tests/qemu.sh $(BUILD)

# make test-toolchains: the library, programs and SMOKE_TESTS built by each other compiler users
# have (TOOLCHAINS: GCC 11, as Ubuntu 22.04; clang 14) with warnings as errors into build-<cc>/,
# the tests run; a compiler that is absent is skipped with a message (make deps-test installs it).
TOOLCHAINS  := gcc-11 clang
SMOKE_TESTS := test_tensor test_ops test_nn test_gpt test_steady
test-toolchains:
	@for cc in $(TOOLCHAINS); do \
	  if ! command -v $$cc >/dev/null; then \
	    echo "test-toolchains: $$cc SKIPPED (not installed: make deps-test)"; continue; fi; \
	  mkdir -p build-$$cc; \
	  $(MAKE) --no-print-directory CC=$$cc BUILD=build-$$cc EXTRA_CFLAGS=-Werror all \
	    $(SMOKE_TESTS:%=build-$$cc/tests/%) >build-$$cc/make.log 2>&1 || \
	    { tail -30 build-$$cc/make.log; echo "test-toolchains: $$cc: the build failed"; exit 1; }; \
	  for t in $(SMOKE_TESTS); do build-$$cc/tests/$$t || \
	    { echo "test-toolchains: $$cc: $$t failed"; exit 1; }; done; \
	  echo "test-toolchains: $$cc: built without warnings, $(words $(SMOKE_TESTS)) tests passed"; \
	done

# scripts/check_links.py: the Markdown pages' relative links and anchors (make test runs it too,
# as tests/test_links.sh).
check-links:
	python3 scripts/check_links.py

# scripts/depth_study.py: trains, plots with gnuplot, writes docs/depth-study*.md and PNGs.
depth-study: all
	python3 scripts/depth_study.py
depth-study-quick: all
	python3 scripts/depth_study.py --quick
depth-study-1000: all
	python3 scripts/depth_study.py --thousand

# bench/run.sh: the GPT step against torch, then each bench/*.py; writes bench/RESULTS.md (~10 min).
bench: all $(BENCHES)
	@MT_BUILD=$(BUILD) sh bench/run.sh

asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -fno-omit-frame-pointer" \
	  EXTRA_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all" \
	  EXTRA_LDFLAGS="-fsanitize=address,undefined" test

# valgrind memcheck over the C tests: definite and indirect leaks and every invalid access fail a
# test. Built for the x86-64 baseline at -O1 and with OpenBLAS's Haswell kernels: valgrind knows no AVX-512.
VALGRIND := valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite,indirect \
            --error-exitcode=1
valgrind:
	$(MAKE) BUILD=build-valgrind PORTABLE=1 OPT=-O1 valgrind-run
# (not test_steady: it counts allocations by wrapping malloc, which valgrind replaces)
VG_TESTS := $(filter-out %/test_steady,$(TESTS))
valgrind-run: $(VG_TESTS)
	@pass=0; fail=0; failed=; for t in $(VG_TESTS); do \
	  if OMP_NUM_THREADS=1 OPENBLAS_CORETYPE=Haswell $(VALGRIND) $$t >$$t.valgrind 2>&1; \
	  then pass=$$((pass + 1)); else fail=$$((fail + 1)); failed="$$failed $${t##*/}"; \
	    tail -30 $$t.valgrind; fi; echo "  ($$(grep -v '^==' $$t.valgrind | tail -1))"; \
	done; [ -z "$$failed" ] || echo "failed:$$failed"; echo "$$pass passed, $$fail failed"; \
	[ $$fail -eq 0 ]

# The library is clang-built once with coverage and the sanitizers; each fuzzer links it.
FUZZ_SECONDS ?= 600
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=address,undefined \
               -fno-sanitize-recover=all -Wno-pass-failed -fopenmp -Isrc -I$(BLAS_INC)
FUZZ_OBJ := $(SRC:%.c=build-fuzz/%.o) build-fuzz/$(PAGE).o
FUZZERS  := $(patsubst tests/fuzz/%.c,build-fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
build-fuzz/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
build-fuzz/$(PAGE).o: $(BUILD)/$(PAGE).c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -c $< -o $@
build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJ)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_OBJ) $(LDFLAGS) $(LDLIBS) -o $@

fuzz: $(FUZZERS)
	@for f in $(FUZZERS); do name=$${f#build-fuzz/fuzz_}; mkdir -p build-fuzz/corpus-$$name; \
	  echo "fuzz $$name for $(FUZZ_SECONDS) s"; \
	  dict=tests/fuzz/$$name.dict; [ -e $$dict ] && dict=-dict=$$dict || dict=; \
	  $$f $$dict -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=build-fuzz/$$name- build-fuzz/corpus-$$name \
	    tests/fuzz/corpus/$$name 2>build-fuzz/$$name.log || { tail -40 build-fuzz/$$name.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|cov:" build-fuzz/$$name.log | tail -2; \
	done

# npm's playwright-core (the driver of Debian's chromium; no browser download) into build-node/:
# tests/test_report_html.sh opens the HTML report in headless Chromium with it.
deps-browser:
	npm install --prefix build-node --no-audit --no-fund --ignore-scripts playwright-core@1.64.1

# Installs what is missing; does nothing when everything is present.
deps deps-test: PKGS = $(DEPS_RUN) $(if $(filter deps-test,$@),$(DEPS_TEST)) \
                       $(if $(filter 1,$(MPI)),$(DEPS_MPI))
deps deps-test:
	@missing=$$(for p in $(PKGS); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	done); \
	if [ -z "$$missing" ]; then echo "$@: all packages present"; else \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "$@: installing$$(echo $$missing | sed 's/^/ /')"; \
	  $$sudo apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@if [ $@ = deps-test ]; then $(MAKE) --no-print-directory deps-cross; fi
	@if [ $@ = deps-test ] && [ ! -d build-node/node_modules/node-llama-cpp ]; then \
	  $(MAKE) --no-print-directory deps-llamacpp || \
	    echo "deps-test: node-llama-cpp not installed: test_import_gguf skips its llama.cpp case"; fi
	@if [ $@ = deps-test ] && [ ! -d build-node/node_modules/playwright-core ]; then \
	  $(MAKE) --no-print-directory deps-browser || \
	    echo "deps-test: playwright-core not installed: test_report_html skips"; fi

# llama.cpp's CPU build as npm's node-llama-cpp ships it (libllama, libggml, the node addon; 85 MB)
# into build-node/: tests/test_import_gguf.sh quantizes, dequantizes and generates with it.
deps-llamacpp:
	npm install --prefix build-node --no-audit --no-fund --ignore-scripts --omit=optional \
	  node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1

# The aarch64 cross compiler, qemu-user and the arm64 libraries (Debian's multiarch) of
# make CROSS=aarch64 and make test-aarch64 (make deps-test installs them too: CI runs the latter).
DEPS_CROSS := gcc-aarch64-linux-gnu qemu-user libopenblas-openmp-dev:arm64 libopenblas0-openmp:arm64 \
              libcjson-dev:arm64 libstb-dev:arm64 zlib1g-dev:arm64 libgomp1:arm64
deps-cross:
	@sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	dpkg --print-foreign-architectures | grep -qx arm64 || \
	  { $$sudo dpkg --add-architecture arm64 && $$sudo apt-get update -q; }; \
	$(MAKE) deps PKGS="$(DEPS_CROSS)"

clean:
	rm -rf build build-asan build-valgrind build-fuzz build-mpi build-aarch64 build-portable \
	  $(TOOLCHAINS:%=build-%) $(PROGS)

.SECONDARY: $(TESTLIB) $(OBJ)

-include $(OBJ:.o=.d) $(TESTLIB:.o=.d)
