# Inkling MoE layer: reference, OpenBLAS and CUDA paths, differential harness.
#
#   make test            install what is missing, build, run every test (cmocka summaries)
#   make fuzz            the differential fuzzer over every available path (FUZZ_SECONDS, FUZZ_SEED,
#                        FUZZ_SUITES: smoke,ci by default; nightly for the real-model shapes), then
#                        stress mode (determinism across history) for a fifth of FUZZ_SECONDS
#   make fuzz-selftest   show that the fuzzer catches every planted bug (harness/mutants.c)
#   make asan            the tests again under AddressSanitizer + UndefinedBehaviorSanitizer
#   make coverage        line and branch coverage of common/, ref/, opt/blas/ by make test + make fuzz
#   make fuzz-parse      libFuzzer on the safetensors and config.json parsers (FUZZ_PARSE_SECONDS)
#   make golden          regenerate golden/cases with the NumPy generator (golden-check: compare)
#   make bench-cpu       reference vs OpenBLAS path on Inkling-Small (BENCH_ARGS; minutes)
#   make bench-cuda      the kernel lab over T on a GPU host: CSV per stage and T, and its PNG
#   make bench-plot      the PNG of a lab CSV on any machine (CSV=FILE; installs gnuplot-nox)
#   make bench-ab        this tree against another build on a GPU host (BASELINE=.../inkling-moe)
#   make cuda-check      build the CUDA path (nvcc) and the kernel lab, `inkling-moe lab` (run it on a GPU host)
#   make examples        the example plugins and worker (examples/; docs/external-paths.md)
#   make fuzz-external   fuzz the example plugin and worker (EXTERNAL_SECONDS); the planted bug must fail
#   make install         the tool, library, headers and inkling-moe.pc under PREFIX (/usr/local)
#   make help            every target
#
# Out-of-source: everything lands under $(BUILD). Libraries are detected with pkg-config and
# nvcc on PATH (or in /usr/local/cuda); what was found is printed once per build.

BUILD       ?= build
CC          ?= cc
NVCC        ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME   ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH   ?= -gencode arch=compute_90a,code=sm_90a
PYTHON      ?= python3
FUZZ_SECONDS ?= 60
FUZZ_PARSE_SECONDS ?= 60
FUZZ_SEED   ?=
FUZZ_SUITES ?= smoke,ci
FUZZ_STRESS_SUITES ?= smoke,ci
SANITIZE    ?=
COVERAGE    ?=

pc_exists = $(shell pkg-config --exists $(1) 2>/dev/null && echo yes)
HAVE_OPENBLAS := $(call pc_exists,openblas)
HAVE_CMOCKA   := $(call pc_exists,cmocka)
HAVE_CJSON    := $(call pc_exists,libcjson)
HAVE_CUDA     := $(if $(NVCC),yes,)

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wvla
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 $(WARN) -D_POSIX_C_SOURCE=200809L -fopenmp $(SANITIZE) $(COVERAGE)
CPPFLAGS += -I. -MMD -MP
LDLIBS   += -lm -fopenmp -ldl
NVFLAGS  ?= -O3 -g -lineinfo
NVFLAGS  += -std=c++17 $(CUDA_ARCH) -I. -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings -MMD -MP

ifeq ($(HAVE_CJSON),yes)
  CPPFLAGS += $(shell pkg-config --cflags libcjson)
  LDLIBS   += $(shell pkg-config --libs libcjson)
endif

# ---------------------------------------------------------------- sources
COMMON_SRC  := $(wildcard common/*.c)
REF_SRC     := $(wildcard ref/*.c)
HARNESS_SRC := $(filter-out harness/main.c,$(wildcard harness/*.c))
BLAS_REAL := $(filter-out opt/blas/blas_stub.c,$(wildcard opt/blas/*.c))
CUDA_REAL := $(wildcard opt/cuda/*.cu)
ifeq ($(HAVE_OPENBLAS)$(if $(BLAS_REAL),yes),yesyes)
  BLAS_SRC  := $(BLAS_REAL)
  CPPFLAGS  += -DMOE_HAVE_OPENBLAS $(shell pkg-config --cflags openblas)
  LDLIBS    += $(shell pkg-config --libs openblas)
else
  BLAS_SRC  := opt/blas/blas_stub.c opt/blas/blas_hints.c
endif
ifeq ($(HAVE_CUDA)$(if $(CUDA_REAL),yes),yesyes)
  CUDA_SRC  := $(CUDA_REAL)
  CUDA_CSRC := $(filter-out opt/cuda/cuda_stub.c,$(wildcard opt/cuda/*.c))
  CPPFLAGS  += -DMOE_HAVE_CUDA -isystem $(CUDA_HOME)/include
  LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++
  # CUPTI, for the lab's --timeline only: its header at build time, its library loaded at run
  # time (opt/cuda/cuda_timeline.cu), wherever this toolkit keeps them
  CUPTI_INC := $(firstword $(wildcard $(CUDA_HOME)/include/cupti.h $(CUDA_HOME)/extras/CUPTI/include/cupti.h))
  CUPTI_LIB := $(firstword $(wildcard $(CUDA_HOME)/lib64/libcupti.so $(CUDA_HOME)/lib/libcupti.so \
                 $(CUDA_HOME)/extras/CUPTI/lib64/libcupti.so))
  NVFLAGS   += $(if $(CUPTI_INC),-I$(dir $(CUPTI_INC))) $(if $(CUPTI_LIB),-DMOE_CUPTI_LIB='"$(CUPTI_LIB)"')
else
  CUDA_SRC  :=
  CUDA_CSRC := opt/cuda/cuda_stub.c
endif

LIB_CSRC := $(COMMON_SRC) $(REF_SRC) $(HARNESS_SRC) $(BLAS_SRC) $(CUDA_CSRC)
LIB_OBJ  := $(LIB_CSRC:%.c=$(BUILD)/obj/%.o) $(CUDA_SRC:%.cu=$(BUILD)/obj/%.cu.o)
LIB      := $(BUILD)/lib/libinkling.a
TOOL     := $(BUILD)/bin/inkling-moe
OVERLAP_PROBE := $(BUILD)/bin/cuda-overlap-probe
STREAM_PROBE := $(BUILD)/bin/cuda-stream-probe
WGMMA_PROBE := $(BUILD)/bin/cuda-wgmma-probe
WGMMA_WS_PROBE := $(BUILD)/bin/cuda-wgmma-ws-probe
STAGING_PROBE := $(BUILD)/bin/cuda-staging-probe
TEST_SRC := $(wildcard tests/test_*.c)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# ---------------------------------------------------------------- top-level targets
.PHONY: all deps deps-python test test-now check-ptxas-guard asan coverage fuzz fuzz-now fuzz-selftest fuzz-parse golden \
        golden-check bench-cpu config clean help examples install fuzz-external

all: config $(LIB) $(TOOL) $(TESTS) examples $(if $(CUDA_SRC),$(OVERLAP_PROBE) $(STREAM_PROBE) $(WGMMA_PROBE) $(WGMMA_WS_PROBE) $(STAGING_PROBE))

deps:
	@sh ./install-deps.sh

deps-python: deps
	@sh ./install-deps.sh --python

config:
	@echo "build $(BUILD): openblas=$(or $(HAVE_OPENBLAS),no) cmocka=$(or $(HAVE_CMOCKA),no)" \
	      "cjson=$(or $(HAVE_CJSON),no) nvcc=$(or $(NVCC),no)$(if $(SANITIZE), sanitize=$(SANITIZE))"

# The dependency install runs first, then a fresh make so that detection sees what it installed.
test: deps
	@$(MAKE) --no-print-directory test-now

test-now: all $(if $(CUDA_SRC),check-ptxas-guard)
	@sh tests/run-tests.sh $(BUILD)

# The .cu rule's ptxas guard refuses a planted kernel whose wgmma ptxas serialises.
check-ptxas-guard:
	@if $(MAKE) --no-print-directory -s $(BUILD)/obj/tests/planted/serialized_wgmma.cu.o \
	        >$(BUILD)/ptxas-guard.log 2>&1; then \
	    echo "ptxas guard: the planted serialised wgmma was built; the .cu rule lets it through"; \
	    exit 1; \
	elif grep -q 'Potential Performance Loss' $(BUILD)/ptxas-guard.log; then \
	    echo "ptxas guard: the planted serialised wgmma (tests/planted) was refused, as it must be"; \
	else cat $(BUILD)/ptxas-guard.log; echo "ptxas guard: the planted kernel failed otherwise"; exit 1; fi

asan: deps
	@$(MAKE) --no-print-directory BUILD=build/asan NVCC= \
	    SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	    test-now

fuzz: deps
	@$(MAKE) --no-print-directory fuzz-now

# Coverage (gcc --coverage, read with gcov): a -O0 build without CUDA under build/coverage runs
# make test and make fuzz (FUZZ_SECONDS), then tests/coverage.sh sums the lines and branches of
# common/, ref/ and opt/blas/ and leaves annotated sources in build/coverage/gcov/.
coverage: deps
	@find build/coverage -name '*.gcda' -delete 2>/dev/null || true
	@$(MAKE) --no-print-directory BUILD=build/coverage NVCC= COVERAGE="-O0 --coverage" test-now; \
	$(MAKE) --no-print-directory BUILD=build/coverage NVCC= COVERAGE="-O0 --coverage" fuzz-now; \
	sh tests/coverage.sh build/coverage

# FUZZ_SECONDS (whole seconds) is shared: four fifths for the fuzzer, one fifth for stress mode.
# FUZZ_MAX_MEMORY (GB): the fuzzer skips cases estimated above it (default: the host's available memory).
# Both always run; the target fails if either does.
fuzz-now: all
	@total=$(FUZZ_SECONDS); stress=$$((total / 5)); \
	$(TOOL) fuzz --seconds $$((total - stress)) --suite $(FUZZ_SUITES) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED)) \
	    $(if $(FUZZ_MAX_MEMORY),--max-memory $(FUZZ_MAX_MEMORY)) --report-dir $(BUILD)/fuzz-report; rc=$$?; \
	$(TOOL) fuzz --stress --seconds $$stress --suite $(FUZZ_STRESS_SUITES) \
	    $(if $(FUZZ_SEED),--seed $(FUZZ_SEED)) --report-dir $(BUILD)/fuzz-report; rc2=$$?; \
	[ $$rc -eq 0 ] && [ $$rc2 -eq 0 ]

# Proof of strength: every deliberately broken path (harness/mutants.c) must be caught.
fuzz-selftest: all
	@$(TOOL) fuzz --selftest --seconds $(FUZZ_SECONDS) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

# libFuzzer on the safetensors header and config.json parsers; new inputs and crashes under $(BUILD).
fuzz-parse:
	@mkdir -p $(BUILD)/fuzz-parse/corpus $(BUILD)/fuzz-parse/crashes
	clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined -I. \
	    $(shell pkg-config --cflags libcjson) fuzz/fuzz_parse.c common/safetensors.c \
	    common/checkpoint.c common/shard.c common/numeric.c common/status.c common/out_file.c \
	    common/routed_formats.c common/in_file.c \
	    $(shell pkg-config --libs libcjson) -lm -o $(BUILD)/fuzz-parse/fuzz_parse
	@echo "fuzz-parse: $(FUZZ_PARSE_SECONDS) s; full log in $(BUILD)/fuzz-parse/log"
	@$(BUILD)/fuzz-parse/fuzz_parse -max_total_time=$(FUZZ_PARSE_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(BUILD)/fuzz-parse/crashes/ $(BUILD)/fuzz-parse/corpus fuzz/corpus/parse \
	    > $(BUILD)/fuzz-parse/log 2>&1; rc=$$?; \
	    grep -E "^(Done|stat::|==[0-9]+==|SUMMARY|.*ERROR)" $(BUILD)/fuzz-parse/log | head -40; \
	    [ $$rc -eq 0 ] || tail -n 40 $(BUILD)/fuzz-parse/log; exit $$rc

golden: deps-python
	$(PYTHON) golden/gen_golden.py --out golden/cases

golden-check: deps-python
	$(PYTHON) golden/gen_golden.py --check golden/cases

# The CPU benchmark (not part of `make test`): Inkling-Small, reference vs OpenBLAS path.
BENCH_CPU := $(BUILD)/bin/bench_cpu
bench-cpu: config $(if $(filter -DMOE_HAVE_OPENBLAS,$(CPPFLAGS)),$(BENCH_CPU))
	$(if $(filter -DMOE_HAVE_OPENBLAS,$(CPPFLAGS)),$(BENCH_CPU) $(BENCH_ARGS),@echo "bench-cpu: needs OpenBLAS (install libopenblas-dev)"; exit 1)

$(BENCH_CPU): opt/blas/bench/bench_cpu.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@

clean:
	rm -rf $(BUILD)

# ---------------------------------------------------------------- plugins and external paths
# The example plugins are built as a user outside the tree builds one: the public header only
# (-Icommon stands for `pkg-config --cflags inkling-moe`), no sanitizer, no link to the library.
EX_CFLAGS := -std=c11 $(WARN) -O2 -g -fPIC -D_POSIX_C_SOURCE=200809L -Icommon
EXAMPLES  := $(BUILD)/examples/libexample.so $(BUILD)/examples/libplanted_bug.so $(BUILD)/examples/moe-worker
FAULT_PLUGINS := $(patsubst %,$(BUILD)/tests/plugins/libfault_%.so,abi layout noentry crash exit hang)

examples: $(EXAMPLES) $(FAULT_PLUGINS)

$(BUILD)/examples/lib%.so: examples/plugin/%.c examples/plugin/example.c common/moe_plugin.h common/moe.h
	@mkdir -p $(dir $@)
	$(CC) $(EX_CFLAGS) -shared $< -lm -o $@

# The example engine run as an external program (exec: and worker:), built on the library.
$(BUILD)/examples/moe-worker: examples/worker/worker.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Icommon $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@

# Plugins that fail on purpose (tests/test_plugin.c): one source, one fault each.
$(BUILD)/tests/plugins/libfault_%.so: tests/plugin_faults.c common/moe_plugin.h common/moe.h
	@mkdir -p $(dir $@)
	$(CC) $(EX_CFLAGS) -shared -DFAULT_$* $< -o $@

# The example plugin and the example worker must pass; the planted-bug plugin must be caught
# and its case shrunk.
EXTERNAL_SECONDS ?= 15
EXTERNAL_OUT := $(BUILD)/fuzz-external
fuzz-external: all
	@mkdir -p $(EXTERNAL_OUT)
	$(TOOL) fuzz --paths plugin:$(BUILD)/examples/libexample.so --seconds $(EXTERNAL_SECONDS) \
	    --report-dir $(EXTERNAL_OUT)/example --regress-dir $(EXTERNAL_OUT)/regressions
	$(TOOL) fuzz --paths 'worker:$(BUILD)/examples/moe-worker --worker' --seconds $(EXTERNAL_SECONDS) \
	    --report-dir $(EXTERNAL_OUT)/worker --regress-dir $(EXTERNAL_OUT)/regressions
	@$(TOOL) fuzz --paths plugin:$(BUILD)/examples/libplanted_bug.so --max-cases 2 --seed 1 \
	    --report-dir $(EXTERNAL_OUT)/planted --regress-dir $(EXTERNAL_OUT)/regressions > $(EXTERNAL_OUT)/planted.log; \
	    rc=$$?; grep -E "^FAILURE|shrunk|^[0-9]+ passed" $(EXTERNAL_OUT)/planted.log | head -4; \
	    if [ $$rc -eq 1 ] && grep -q "shrunk case:" $(EXTERNAL_OUT)/planted.log; then \
	        echo "fuzz-external: the planted bug was caught and shrunk (as it must be)"; \
	    else echo "fuzz-external: the planted bug was NOT caught (exit $$rc)"; exit 1; fi

PREFIX ?= /usr/local
install: $(LIB) $(TOOL)
	@mkdir -p $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/inkling-moe
	cp $(TOOL) $(DESTDIR)$(PREFIX)/bin/
	cp $(LIB) $(DESTDIR)$(PREFIX)/lib/
	cp common/moe.h common/moe_plugin.h common/checkpoint.h common/safetensors.h common/numeric.h \
	    common/layer_data.h $(DESTDIR)$(PREFIX)/include/inkling-moe/
	$(if $(CUDA_SRC),sed -e 's|"../../common/moe.h"|"moe.h"|' opt/cuda/cuda_layer.h \
	    > $(DESTDIR)$(PREFIX)/include/inkling-moe/cuda_layer.h)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBS@|$(LDLIBS)|' inkling-moe.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/inkling-moe.pc

help:
	@sed -n '1,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

# ---------------------------------------------------------------- rules
$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# ptxas's report is read for "Potential Performance Loss" (a wgmma serialised, a setmaxnreg
# ignored: silent slowdowns, not warnings), which fails the build like a warning does; the rest
# of the report (registers, stack) is dropped.
$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -Xptxas -v -c $< -o $@ 2> $@.ptxas; rc=$$?; \
	    grep -v -e '^ptxas info' -e '^ *[0-9]* bytes stack frame' $@.ptxas >&2; \
	    if grep 'Potential Performance Loss' $@.ptxas >&2; then rm -f $@; exit 1; fi; exit $$rc

$(TOOL): harness/main.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@

# A probe of how the GPU places a second stream's kernel beside a running one
# (opt/cuda/check/overlap_probe.cu; docs/perf-cuda.md, eighth run); runs only on a GPU host.
$(OVERLAP_PROBE): opt/cuda/check/overlap_probe.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $< -o $@

# How fast one bf16 matrix (the sinks' w13) streams for one token on part of the GPU, by bytes in
# flight and multiprocessors (opt/cuda/check/stream_probe.cu); runs only on a GPU host.
# It times the layer's own cuBLASLt plan beside its kernels, so it links the library.
$(STREAM_PROBE): opt/cuda/check/stream_probe.cu $(LIB)
	@mkdir -p $(dir $@) $(BUILD)/obj/opt/cuda/check
	$(NVCC) $(NVFLAGS) -c $< -o $(BUILD)/obj/opt/cuda/check/stream_probe.o
	$(CC) $(CFLAGS) $(BUILD)/obj/opt/cuda/check/stream_probe.o $(LIB) $(LDLIBS) -o $@

# What the host call's staged transfers cost against the bus alone, piece by piece
# (opt/cuda/check/staging_probe.c; docs/perf-cuda.md, thirty-ninth run); runs only on a GPU host.
$(STAGING_PROBE): opt/cuda/check/staging_probe.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@

# What keeps the 128-row expert tiles' tensor pipe from its peak: their chunk loop taken apart,
# by wgmma's n (opt/cuda/check/wgmma_probe.cu), and the same work the other way round, decoded
# once into shared memory by warps of its own (wgmma_ws_probe.cu); run only on a GPU host. Their
# objects take the .cu rule, whose ptxas check matters here too: a serialised wgmma would time
# something else.
$(WGMMA_PROBE): $(BUILD)/obj/opt/cuda/check/wgmma_probe.cu.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@
$(WGMMA_WS_PROBE): $(BUILD)/obj/opt/cuda/check/wgmma_ws_probe.cu.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@

# The CUDA path built with nvcc (warnings as errors) into the tool, whose `lab` command is the
# kernel lab: every CUDA variant at a real shape on a GPU, checked and timed per stage
# (harness/lab.h; runs only where an sm_90 GPU is).
.PHONY: cuda-check
cuda-check: config $(TOOL)
	@test -n "$(CUDA_SRC)" || { echo "cuda-check needs nvcc"; exit 1; }
	@echo "cuda-check: built; on a GPU host: $(TOOL) lab --variant all (inkling-moe lab --help)"

# The CUDA benchmark on a GPU host (not part of make test): the kernel lab over every CUDA
# variant, Inkling-Small at T = 1, 8, 64, 512, 4096 on its own (skewed) routing and on uniform
# routing (lab --routing uniform: the routing contract.md [floors] counts) and Inkling at T = 1,
# 64, into one CSV (a row per shape, variant, T and stage; columns in harness/lab.h) under
# $(BENCH_CUDA_DIR), with the lab's logs, then its pictures where gnuplot is (else: make
# bench-plot CSV=... anywhere).
BENCH_CUDA_DIR   ?= $(BUILD)/bench-cuda
BENCH_CUDA_ITERS ?= 20
BENCH_CUDA_ARGS  ?= --variant all --check 1
.PHONY: bench-cuda bench-plot
bench-cuda: config $(TOOL)
	@mkdir -p $(BENCH_CUDA_DIR); csv=$(BENCH_CUDA_DIR)/bench-cuda.csv; rm -f $$csv; \
	for run in "inkling-small 1,8,64,512,4096 skewed" "inkling-small 1,8,64,512,4096 uniform" \
	           "inkling 1,64 skewed"; do set -- $$run; name=$$1; [ $$3 = skewed ] || name=$$1-$$3; \
	    { $(TOOL) lab --shape $$1 --routing $$3 --tokens $$2 --iters $(BENCH_CUDA_ITERS) $(BENCH_CUDA_ARGS) \
	        --csv $$csv 2>&1; echo $$? > $(BENCH_CUDA_DIR)/$$name.rc; } | tee $(BENCH_CUDA_DIR)/$$name.log; \
	    rc=$$(cat $(BENCH_CUDA_DIR)/$$name.rc); [ $$rc -eq 0 ] || { echo "bench-cuda: lab exit $$rc on $$name"; exit $$rc; }; \
	done; \
	if command -v gnuplot >/dev/null 2>&1; then sh harness/bench/plot.sh $$csv; \
	else echo "bench-cuda: no gnuplot here; draw it anywhere: make bench-plot CSV=$$csv"; fi

# Is this tree faster than another build? The lab with BASELINE (another build's inkling-moe)
# and with this tree's, AB_ROUNDS runs each in alternating processes, then lab-compare: each
# (variant, T) of the serving graph with the exact rank-sum p of the runs (harness/bench/ab.sh).
# On a GPU host; AB_MAX_SLOWDOWN=PCT fails where this tree is that much slower, told apart.
AB_ROUNDS ?= 4
AB_ARGS   ?= --tokens 1,8,64,512,4096 --check none --iters 20
AB_DIR    ?= $(BUILD)/bench-ab
.PHONY: bench-ab
bench-ab: config $(TOOL)
	@test -n "$(BASELINE)" || { echo "usage: make bench-ab BASELINE=OTHER_BUILD/bin/inkling-moe [AB_ROUNDS=4] [AB_ARGS='lab options'] [AB_MAX_SLOWDOWN=PCT]"; exit 2; }
	@rm -rf $(AB_DIR)
	@sh harness/bench/ab.sh -r $(AB_ROUNDS) -o $(AB_DIR) $(if $(AB_MAX_SLOWDOWN),-m $(AB_MAX_SLOWDOWN)) \
	    $(BASELINE) $(TOOL) $(AB_ARGS)

# The pictures of a lab CSV (harness/bench/plot.sh), on any machine: gnuplot-nox is installed
# if missing. PLOT_PREFIX: where the PNGs go (default: the CSV's path without .csv).
bench-plot:
	@test -n "$(CSV)" || { echo "usage: make bench-plot CSV=FILE [PLOT_PREFIX=PATH]"; exit 2; }
	@sh ./install-deps.sh --plot
	@sh harness/bench/plot.sh $(CSV) $(PLOT_PREFIX)

$(BUILD)/tests/%: tests/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(shell pkg-config --cflags cmocka 2>/dev/null) $< $(LIB) \
	    $(shell pkg-config --libs cmocka 2>/dev/null) $(LDLIBS) -o $@

-include $(shell find $(BUILD)/obj $(BUILD)/tests -name '*.d' 2>/dev/null)
