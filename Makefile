# Kernel Ladder: one build for every chapter. `make help` lists the targets.

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(or $(wildcard $(CUDA_HOME)/bin/nvcc),$(shell command -v nvcc 2>/dev/null))
CUDA_ARCHS ?= 75 80 86 89 90
CC ?= gcc

# Build with every core; a -j on the command line still wins.
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)

# `make test` (or test-asan, or fuzz) where no GPU is present runs no GPU code, so one
# architecture will do; it says so.
ifneq ($(filter test test-asan fuzz,$(MAKECMDGOALS)),)
ifeq ($(origin CUDA_ARCHS),file)
ifeq ($(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU'),0)
CUDA_ARCHS := $(lastword $(CUDA_ARCHS))
$(info make $(firstword $(filter test test-asan fuzz,$(MAKECMDGOALS))): no GPU found, so building for sm_$(CUDA_ARCHS) only (set CUDA_ARCHS to choose))
endif
endif
endif

BUILD := build
# Objects live in a folder per target list, so changing CUDA_ARCHS rebuilds what it must.
empty :=
space := $(empty) $(empty)
OBJ := $(BUILD)/obj-sm$(subst $(space),-,$(strip $(CUDA_ARCHS)))
CHAPTERS := $(patsubst chapters/%/main.cu,%,$(sort $(wildcard chapters/*/main.cu)))

# Machine code for every listed GPU, plus PTX of the newest so later GPUs can JIT it.
LAST_ARCH := $(lastword $(CUDA_ARCHS))
GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
           -gencode arch=compute_$(LAST_ARCH),code=compute_$(LAST_ARCH)

WARN := -Wall -Wextra
CFLAGS := -std=c11 -O2 -g $(WARN) -D_GNU_SOURCE -Icommon -I$(CUDA_HOME)/include
NVCCFLAGS = -std=c++20 -O3 -lineinfo $(GENCODE) -Xcompiler -Wall,-Wextra -Icommon
LDFLAGS := -L$(CUDA_HOME)/lib64 -Xlinker -rpath,$(CUDA_HOME)/lib64
LDLIBS := -lcudnn -lcublasLt -lcublas -lz -lm

# `make test-asan` builds again into $(BUILD)/asan with KL_ASAN=1: the C sources (common/, the
# references, the tests) under AddressSanitizer and UndefinedBehaviorSanitizer, and the link with
# the same flags, passed by nvcc to the host compiler; the nvcc-built objects stay as they are.
HOST_SANITIZERS := -fsanitize=address -fsanitize=undefined -fno-omit-frame-pointer \
                   -fno-sanitize-recover=undefined
ifeq ($(KL_ASAN),1)
CFLAGS += $(HOST_SANITIZERS)
LDFLAGS += $(addprefix -Xcompiler ,$(HOST_SANITIZERS))
endif

# The programs are relinked when the list of architectures changes, not only when an object
# does: their objects then come from another folder, whose files may be older.
ARCH_STAMP := $(BUILD)/cuda-archs
$(shell mkdir -p $(BUILD) && [ "$$(cat $(ARCH_STAMP) 2>/dev/null)" = "$(strip $(CUDA_ARCHS))" ] \
        || echo "$(strip $(CUDA_ARCHS))" > $(ARCH_STAMP))
objects = $(filter %.o %.a,$^)

COMMON_C := $(wildcard common/*.c)
COMMON_OBJ := $(COMMON_C:%.c=$(OBJ)/%.o)

# A chapter is a library and a program. build/lib/libkl-NN.a holds its rungs and api.cu, what
# other chapters call through its api.h; the program adds main.cu (the rung table), vendor.cu,
# exercise.cu and reference.c. A chapter names the chapters it calls in chapters/NN-name/uses
# (their numbers on one line), and links their libraries.
chapter_number = $(firstword $(subst -, ,$(1)))
PROGRAM_FILES := main.cu vendor.cu exercise.cu reference.c
chapter_srcs = $(wildcard chapters/$(1)/*.cu) $(wildcard chapters/$(1)/*.c)
objs_of = $(patsubst %,$(OBJ)/%.o,$(basename $(1)))
chapter_lib_objs = $(call objs_of,$(filter-out $(addprefix chapters/$(1)/,$(PROGRAM_FILES)),\
                                   $(call chapter_srcs,$(1))))
chapter_program_objs = $(call objs_of,$(filter $(addprefix chapters/$(1)/,$(PROGRAM_FILES)),\
                                       $(call chapter_srcs,$(1))))
chapter_uses = $(foreach n,$(shell cat chapters/$(1)/uses 2>/dev/null),$(filter $(n)-%,$(CHAPTERS)))
lib_of = $(BUILD)/lib/libkl-$(call chapter_number,$(1)).a
chapter_named = $(filter $(1)-%,$(CHAPTERS))
chapter_libs = $(call lib_of,$(1)) $(foreach u,$(call chapter_uses,$(1)),$(call lib_of,$(u)))
# The include paths of a chapter's source file $(1): its own folder, and chapters/, so that
# another chapter's entry points are included as "05-matmul/api.h".
chapter_includes = $(if $(filter chapters/%,$(1)),-I$(dir $(1)) -Ichapters)
# The tests link each chapter's rung table from main.cu built without main().
test_objs = $(patsubst %/main.o,%/main.nomain.o,$(call chapter_program_objs,$(1)))
LIBS := $(BUILD)/lib/libkl-common.a $(foreach c,$(CHAPTERS),$(call lib_of,$(c)))

TEST_SRC := $(wildcard tests/*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(OBJ)/%.o)
PROGRAMS := $(CHAPTERS:%=$(BUILD)/bin/%)
CEILING := $(BUILD)/bin/05-mma-sync-ceiling
COPY_CEILING := $(BUILD)/bin/03-copy-ceiling

# `make fuzz`: the libFuzzer targets tests/fuzz/fuzz_*.c (tests/fuzz/README.md), built by clang
# into $(BUILD)/fuzz under AddressSanitizer and UBSan with libFuzzer's coverage. common/ and each
# chapter's main.cu (its rung table, built without main(): check_shape and describe) and api.cu
# (the dims checks) are built so too, their host code by nvcc through clang; the rest of each
# chapter, whose device code never runs here, comes from the plain build in $(OBJ).
FUZZ_CC ?= clang
FUZZ_CXX ?= clang++
FUZZ_SECONDS ?= 60
# Past 256 bytes, so that --variant's 256-byte copy is tried at its edge.
FUZZ_MAX_LEN ?= 512
# A target's own limit, FUZZ_MAX_LEN_<target>: fuzz_idx's valid pairs (of 28x28 images) take
# 811 bytes and more.
FUZZ_MAX_LEN_fuzz_idx := 2048
fuzz_max_len = $(or $(FUZZ_MAX_LEN_$(1)),$(FUZZ_MAX_LEN))
FUZZ := $(BUILD)/fuzz
FUZZ_OBJ := $(FUZZ)/obj
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SANITIZERS := $(HOST_SANITIZERS) -fsanitize=fuzzer-no-link
FUZZ_CFLAGS := -std=c11 -O1 -g $(WARN) -D_GNU_SOURCE -Icommon -I$(CUDA_HOME)/include -I$(FUZZ) \
               $(FUZZ_SANITIZERS)
# clang sees the C++ that nvcc writes, which keeps every static inline function of the headers.
FUZZ_NVCCFLAGS = -ccbin $(FUZZ_CC) -std=c++20 -O1 -g $(GENCODE) -Icommon \
                 -Xcompiler -Wall,-Wextra,-Wno-unused-function \
                 $(addprefix -Xcompiler ,$(FUZZ_SANITIZERS))
# A chapter library's C files (chapter 10's IDX loader, which fuzz_idx calls) are clang's too.
fuzz_chapter_c = $(patsubst %.c,%.o,$(filter %.c,$(filter-out $(addprefix chapters/$(1)/,\
                   $(PROGRAM_FILES)),$(call chapter_srcs,$(1)))))
fuzz_chapter_objs = $(patsubst $(OBJ)/%/main.o,$(FUZZ_OBJ)/%/main.nomain.o,\
                      $(patsubst $(OBJ)/%/api.o,$(FUZZ_OBJ)/%/api.o,\
                        $(filter-out $(addprefix $(OBJ)/,$(call fuzz_chapter_c,$(1))),\
                          $(call chapter_program_objs,$(1)) $(call chapter_lib_objs,$(1))))) \
                    $(addprefix $(FUZZ_OBJ)/,$(call fuzz_chapter_c,$(1)))
FUZZ_LINK_OBJS := $(COMMON_C:%.c=$(FUZZ_OBJ)/%.o) \
                  $(foreach c,$(CHAPTERS),$(call fuzz_chapter_objs,$(c)))
FUZZ_BINS := $(FUZZ_TARGETS:%=$(FUZZ)/bin/%)

.PHONY: all help toolkit deps deps-test deps-plots deps-fuzz test test-asan test-asan-run fuzz \
        run bench plots report sanitize profile clean $(FUZZ_TARGETS:%=fuzz-run-%) \
        $(foreach c,$(CHAPTERS),chapter-$(call chapter_number,$(c)))

all: toolkit $(LIBS) $(PROGRAMS) $(CEILING) $(COPY_CEILING) $(BUILD)/bin/tests

help:
	@echo "make               build every chapter and the tests"
	@echo "make chapter-NN    build chapter NN; ./run then runs it"
	@echo "make test          run every test (GPU tests skip without a GPU, which builds one arch)"
	@echo "make test-asan     the tests again, host C code under AddressSanitizer and UBSan (build/asan)"
	@echo "make fuzz          libFuzzer on the parsers and the IDX loader, FUZZ_SECONDS (60) each (clang)"
	@echo "make run           every chapter's ladder at its default size"
	@echo "make bench         every chapter's size sweep into bench/results/<gpu>/"
	@echo "make plots         plots/*.svg from the CSVs (gnuplot)"
	@echo "make report        BENCHMARKS.md and the chapter tables from the CSVs"
	@echo "make sanitize      every rung under compute-sanitizer memcheck and racecheck"
	@echo "make profile CH=05 VARIANT=v9 [PRESET=large] [DTYPE=fp16]   Nsight Compute on one rung"
	@echo "make deps          install the Debian packages the tests and plots need"
	@echo "CUDA_ARCHS='90' make ...   build for chosen GPUs only (default: $(CUDA_ARCHS))"

toolkit:
	@if [ -z "$(NVCC)" ]; then \
	  echo "nvcc not found: install the CUDA toolkit (12.x or 13.x) with cuDNN 9, or set"; \
	  echo "CUDA_HOME=/path/to/cuda (looked in $(CUDA_HOME)/bin and on PATH)"; exit 3; fi
	@if [ ! -f $(CUDA_HOME)/include/cudnn.h ] && [ ! -f /usr/include/cudnn.h ]; then \
	  echo "cudnn.h not found: install cuDNN 9 for your CUDA (the vendor rungs need it)"; \
	  exit 3; fi

# Debian packages: Criterion for the tests, gnuplot for the plots, zlib and Fashion-MNIST for
# chapter 10; `make fuzz` adds clang and its libFuzzer runtime where they are missing.
DEPS_PKGS := libcriterion-dev gnuplot-nox python3 zlib1g-dev dataset-fashion-mnist
deps:
	@pkgs="$(DEPS_PKGS)"; \
	sudo=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	echo "installing $$pkgs"; \
	$$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$pkgs

deps-test:
	@[ -f /usr/include/criterion/criterion.h ] && [ -f /usr/include/zlib.h ] && \
	  command -v python3 >/dev/null || $(MAKE) --no-print-directory deps

deps-plots:
	@command -v gnuplot >/dev/null || $(MAKE) --no-print-directory deps

deps-fuzz:
	@echo 'int LLVMFuzzerTestOneInput(void) { return 0; }' | \
	  $(FUZZ_CC) -fsanitize=fuzzer,address,undefined -x c - -o /dev/null 2>/dev/null || \
	  $(MAKE) --no-print-directory deps DEPS_PKGS="clang libclang-rt-dev"

$(OBJ)/%.o: %.c | toolkit
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(call chapter_includes,$<) -MMD -MP -c $< -o $@

$(OBJ)/%.o: %.cu | toolkit
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(call chapter_includes,$<) -MMD -MP -c $< -o $@

# Rungs that use instructions of sm_90a alone (wgmma, setmaxnreg): their Hopper code is built
# for sm_90a, which runs on compute capability 9.0 only.
SM90A_RUNGS := chapters/05-matmul/v10_wgmma
$(SM90A_RUNGS:%=$(OBJ)/%.o): GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode \
    arch=compute_$(a:90=90a),code=sm_$(a:90=90a)) -gencode arch=compute_$(LAST_ARCH:90=90a),code=compute_$(LAST_ARCH:90=90a)

$(OBJ)/%.nomain.o: %.cu | toolkit
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(call chapter_includes,$<) -DKL_NO_MAIN -MMD -MP -c $< -o $@

$(OBJ)/tests/%.o: tests/%.c | deps-test toolkit
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ichapters $(addprefix -Ichapters/,$(CHAPTERS)) -MMD -MP -c $< -o $@

.SECONDARY:
.SECONDEXPANSION:
# common/ as a library too, for a program of one's own that calls the chapters' api.h.
$(BUILD)/lib/libkl-common.a: $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $(objects)

$(BUILD)/lib/libkl-%.a: $$(call chapter_lib_objs,$$(call chapter_named,$$*)) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $(objects)

$(BUILD)/bin/%: $(COMMON_OBJ) $$(call chapter_program_objs,%) $$(call chapter_libs,%) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(GENCODE) -o $@ $(objects) $(LDFLAGS) $(LDLIBS)

# Chapter 05's second program: the ceiling of mma.sync on the GPU present (see its header).
$(CEILING): $(OBJ)/chapters/05-matmul/ceiling/mma_sync_ceiling.o $(OBJ)/common/check.o \
            $(OBJ)/common/stats.o $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(GENCODE) -o $@ $(objects) $(LDFLAGS)

# Chapter 03's second program: copies of a softmax pass's bytes beside its rungs (see its header).
$(COPY_CEILING): $(OBJ)/chapters/03-softmax/ceiling/copy_ceiling.o $(COMMON_OBJ) \
                 $(call test_objs,03-softmax) $(call chapter_libs,03-softmax) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(GENCODE) -o $@ $(objects) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bin/tests: $(TEST_OBJ) $(COMMON_OBJ) $(foreach c,$(CHAPTERS),$(call test_objs,$(c))) \
                   $(filter-out %/libkl-common.a,$(LIBS)) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(GENCODE) -o $@ $(objects) $(LDFLAGS) $(LDLIBS) -lcriterion

# make chapter-01: build chapter 01 and point ./run at it. The targets are spelled out, one a
# chapter, since make applies no pattern rule to a phony target.
define chapter_rule
chapter-$(call chapter_number,$(1)): toolkit $(BUILD)/bin/$(1)
	@ln -sfn $(BUILD)/bin/$(1) run && echo "./run now runs $(1) (try ./run --help)"
endef
$(foreach c,$(CHAPTERS),$(eval $(call chapter_rule,$(c))))
chapter-%:
	@echo "no chapter $* (have: $(CHAPTERS))"; exit 2

test: deps-test toolkit $(PROGRAMS) $(BUILD)/bin/tests $(CEILING) $(COPY_CEILING)
	tests/first_commands CUDA_ARCHS="$(CUDA_ARCHS)" BUILD="$(BUILD)"
	python3 bench/report.py --check
	KL_BIN=$(BUILD)/bin $(BUILD)/bin/tests --jobs $(shell nproc 2>/dev/null || echo 1)

# The test program and the three programs it runs (the two ceilings, chapter 10's), host code
# sanitized, in a folder of their own.
# AddressSanitizer's reports (LeakSanitizer's too), in the test program or a program it starts,
# go to files under $(BUILD)/asan/reports, and any such file fails the target: a leak found as a
# Criterion worker exits does not fail its test. UBSan stops the process at its first report.
# The CUDA runtime maps memory where AddressSanitizer keeps its shadow gap (protect_shadow_gap=0);
# leaks are reported, but for those tests/lsan.supp names (the CUDA libraries' own).
test-asan: deps-test toolkit
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/asan CUDA_ARCHS="$(CUDA_ARCHS)" KL_ASAN=1 test-asan-run

ASAN_REPORTS = $(BUILD)/reports
test-asan-run: $(BUILD)/bin/tests $(CEILING) $(COPY_CEILING) $(BUILD)/bin/10-train-cnn
	@rm -rf $(ASAN_REPORTS) && mkdir -p $(ASAN_REPORTS)
	ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1:log_path=$(ASAN_REPORTS)/asan \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	KL_BIN=$(BUILD)/bin $(BUILD)/bin/tests --jobs $(shell nproc 2>/dev/null || echo 1); \
	status=$$?; if [ -n "$$(ls -A $(ASAN_REPORTS))" ]; then \
	  echo "test-asan: sanitizer reports in $(ASAN_REPORTS):"; cat $(ASAN_REPORTS)/*; exit 1; fi; \
	[ $$status != 0 ] || echo "test-asan: no sanitizer report"; exit $$status

# make fuzz [FUZZ_SECONDS=60]: each target for FUZZ_SECONDS on a fresh copy of its seeds,
# tests/fuzz/corpus/<target>/, in $(FUZZ)/corpus/<target>/ (tests/fuzz is never written), one
# input at most FUZZ_MAX_LEN bytes (or the target's own) and 1 s (-timeout=1), with the words of
# tests/fuzz/<target>.dict and value profiles (which steer inputs toward the limits that the
# parsers compare with). A crash, a sanitizer report (leaks included), a timeout or running out
# of memory fails the target, and the input is kept in $(FUZZ)/artifacts/<target>/. The targets
# run side by side, each into $(FUZZ)/<target>.log.
fuzz: deps-fuzz toolkit $(FUZZ_TARGETS:%=fuzz-run-%)

$(FUZZ_TARGETS:%=fuzz-run-%): fuzz-run-%: $(FUZZ)/bin/%
	@rm -rf $(FUZZ)/corpus/$* $(FUZZ)/artifacts/$* && mkdir -p $(FUZZ)/corpus/$* $(FUZZ)/artifacts/$*
	@cp tests/fuzz/corpus/$*/* $(FUZZ)/corpus/$*/
	@echo "fuzz $*: $(FUZZ_SECONDS) s from $$(ls $(FUZZ)/corpus/$* | wc -l) seeds" \
	  "(log: $(FUZZ)/$*.log)"
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	$(FUZZ)/bin/$* -max_total_time=$(FUZZ_SECONDS) -timeout=1 -max_len=$(call fuzz_max_len,$*) \
	  -use_value_profile=1 $(if $(wildcard tests/fuzz/$*.dict),-dict=tests/fuzz/$*.dict) \
	  -print_final_stats=1 -artifact_prefix=$(FUZZ)/artifacts/$*/ $(FUZZ)/corpus/$* \
	  > $(FUZZ)/$*.log 2>&1; status=$$?; \
	stat_of() { sed -n "s/^stat::$$1: *//p" $(FUZZ)/$*.log; }; \
	if [ $$status = 0 ] && [ -z "$$(ls -A $(FUZZ)/artifacts/$*)" ]; then \
	  echo "fuzz $*: $$(stat_of number_of_executed_units) inputs in $(FUZZ_SECONDS) s" \
	    "($$(stat_of average_exec_per_sec)/s), corpus now $$(ls $(FUZZ)/corpus/$* | wc -l)," \
	    "no crash, no sanitizer report, no timeout"; \
	else \
	  tail -n 40 $(FUZZ)/$*.log; \
	  echo "fuzz $*: FAILED (status $$status); inputs kept: $$(ls $(FUZZ)/artifacts/$*)"; \
	  echo "replay one with $(FUZZ)/bin/$* FILE; then make it a regression test" \
	    "(tests/fuzz/README.md)"; \
	  exit 1; \
	fi

# Each chapter's rung table, one KL_CHAPTER(name) line a table, for tests/fuzz/fuzz.h (chapter
# 10's program has none: its rows are epochs). A table spelled otherwise than the sed expects
# would be missed silently, so the two counts must agree.
$(FUZZ)/fuzz_chapters.h: $(CHAPTERS:%=chapters/%/main.cu)
	@mkdir -p $(dir $@)
	@sed -n 's/^extern "C" const struct chapter \([A-Za-z0-9_]*\) = {.*/KL_CHAPTER(\1)/p' $^ > $@.tmp
	@tables=$$(grep -l 'struct chapter [A-Za-z0-9_]* = {' $^ | wc -l); \
	[ "$$(wc -l < $@.tmp)" = "$$tables" ] || { echo "$@: found" \
	  "$$(wc -l < $@.tmp) chapter tables (extern \"C\" const struct chapter NAME = {)" \
	  "in the $$tables main.cu that define one"; exit 1; }
	@mv $@.tmp $@

$(FUZZ_OBJ)/tests/fuzz/%.o: tests/fuzz/%.c $(FUZZ)/fuzz_chapters.h | deps-fuzz toolkit
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Ichapters -MMD -MP -c $< -o $@

$(FUZZ_OBJ)/%.o: %.c | deps-fuzz toolkit
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_OBJ)/%.nomain.o: %.cu | deps-fuzz toolkit
	@mkdir -p $(dir $@)
	$(NVCC) $(FUZZ_NVCCFLAGS) $(call chapter_includes,$<) -DKL_NO_MAIN -MMD -MP -c $< -o $@

$(FUZZ_OBJ)/%.o: %.cu | deps-fuzz toolkit
	@mkdir -p $(dir $@)
	$(NVCC) $(FUZZ_NVCCFLAGS) $(call chapter_includes,$<) -MMD -MP -c $< -o $@

$(FUZZ_BINS): $(FUZZ)/bin/%: $(FUZZ_OBJ)/tests/fuzz/%.o $(FUZZ_LINK_OBJS) $(ARCH_STAMP)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_SANITIZERS) -fsanitize=fuzzer -o $@ $(objects) -L$(CUDA_HOME)/lib64 \
	  -Wl,-rpath,$(CUDA_HOME)/lib64 $(LDLIBS) -lcudart

run: toolkit $(PROGRAMS)
	@status=0; for p in $(PROGRAMS); do $$p || status=$$?; echo; done; exit $$status

bench: toolkit $(PROGRAMS)
	bench/run $(BENCH_CHAPTERS)

plots: deps-plots
	plots/render

report:
	python3 bench/report.py

# Every chapter's `sanitize` preset, a small odd shape, keeps the runs short; single launches
# keep the log readable.
SANITIZE_RUN := --iters 2 --warmup 1 --no-graph
SANITIZE_FLAGS := --preset sanitize $(SANITIZE_RUN)
# Chapter 05's ceiling program takes no flags; it runs as it is, and chapter 03's at a small odd
# shape. vendor_mma_sync declines the chapter's preset (it needs N and K multiples of 8), so it
# also runs alone at a shape it takes.
SANITIZE_MMA_SYNC := $(BUILD)/bin/05-matmul --variant vendor_mma_sync --dtype fp16 --shape 37x40x48 \
	$(SANITIZE_RUN)
# The runs beside the chapters' presets: chapter 09's other two presets reach its strided and 2D
# kernels, then the two ceilings and vendor_mma_sync. Chapter 10 trains two steps of every
# variant at its sanitize batch (its data from SANITIZE_DATA).
SANITIZE_DATA ?= /usr/share/datasets/fashion-mnist
SANITIZE_MORE := "$(BUILD)/bin/09-conv-backward-weight --preset sanitize-stride $(SANITIZE_RUN)" \
	"$(BUILD)/bin/09-conv-backward-weight --preset sanitize-2d $(SANITIZE_RUN)" \
	"$(CEILING)" "$(SANITIZE_MMA_SYNC)" "$(COPY_CEILING) --shape 3x7x5x7"
SANITIZE_FLAGS_10 := --preset sanitize --steps 2 --cpu-steps 1 --data $(SANITIZE_DATA)
# Under racecheck cuDNN's kernels take minutes: chapter 10's vendor and cpu rows are left to the
# other tools, and racecheck runs the rungs built on this book's kernels.
SANITIZE_RACE_10 := --variant v1_library,v2_pool_relu,ours
SANITIZE_TOOLS ?= memcheck racecheck initcheck synccheck
sanitize: toolkit $(PROGRAMS) $(CEILING) $(COPY_CEILING)
	@command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found (it ships with the CUDA toolkit)"; exit 3; }
	@set -e; for p in $(PROGRAMS); do for tool in $(SANITIZE_TOOLS); do \
	  flags="$(SANITIZE_FLAGS)"; case $$p in */10-train-cnn) flags="$(SANITIZE_FLAGS_10)"; \
	    [ $$tool = racecheck ] && flags="$$flags $(SANITIZE_RACE_10)";; esac; \
	  echo "== $$tool $$p $$flags"; \
	  compute-sanitizer --tool $$tool --error-exitcode 1 $$p $$flags; \
	done; done; \
	for run in $(SANITIZE_MORE); do for tool in $(SANITIZE_TOOLS); do \
	  echo "== $$tool $$run"; \
	  compute-sanitizer --tool $$tool --error-exitcode 1 $$run; \
	done; done

# make profile CH=05 VARIANT=v9 [PRESET=large] [DTYPE=fp16]: Nsight Compute on one rung at one
# configuration (bench/profile says what it collects); builds that chapter only.
profile: toolkit $(if $(call chapter_named,$(CH)),$(BUILD)/bin/$(call chapter_named,$(CH)))
	@bench/profile "$(CH)" "$(VARIANT)" "$(PRESET)" "$(DTYPE)"

clean:
	rm -rf $(BUILD) run

-include $(shell find $(OBJ) $(FUZZ_OBJ) -name '*.d' 2>/dev/null)
