# kestrel — build, test and benchmark entry points.
#   make            build/kestrel (release, -O2, warnings on)
#   make debug      build-asan/kestrel with AddressSanitizer + UBSan
#   make test       C unit tests (one runner) + CLI end-to-end tests
#   make test-asan  the same tests under ASan/UBSan
#   make test-cuda  CUDA op tests + GPU end-to-end (needs a GPU)
# CUDA sources (src/backend/cuda/*.cu) are compiled whenever nvcc is found;
# the binary still runs CPU-only where no GPU is present.

BUILD   ?= build
CC      ?= cc
PKGS    := jansson libpcre2-8 libutf8proc libmicrohttpd libcurl libxxhash
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter \
               -Werror=implicit-function-declaration -Isrc -pthread \
               $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
OPT     ?= -O2 -g
CFLAGS  ?=
LDLIBS  := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -ljansson -lpcre2-8 -lutf8proc -lmicrohttpd -lcurl -lxxhash) -lm -pthread
LDFLAGS ?=

# Per-ISA kernels: *_avx2.c and *_avx512.c get their own flags; the choice
# among them is made at run time (backend/cpu/cpu_dispatch.c).
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c

NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CU_SRCS := $(wildcard src/backend/cuda/*.cu)
# The toolkit's root, following symlinks (nvcc may be linked from /usr/local/bin).
CUDA_HOME := $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))
# static cudart: the binary starts on machines without a GPU or driver (CI).
# Toolkit layouts differ (lib64, lib, targets/<arch>/lib, Debian's multiarch
# dir), so look for the archive instead of guessing one path.
CUDART_STATIC := $(if $(strip $(NVCC)),$(firstword $(wildcard \
    $(foreach d,$(CUDA_HOME) $(patsubst %/bin/nvcc,%,$(NVCC)) /usr/local/cuda /usr,\
      $(d)/lib64/libcudart_static.a $(d)/lib/libcudart_static.a \
      $(d)/targets/x86_64-linux/lib/libcudart_static.a $(d)/lib/x86_64-linux-gnu/libcudart_static.a))))
ifneq ($(strip $(NVCC)),)
ifneq ($(strip $(CU_SRCS)),)
ifneq ($(strip $(CUDART_STATIC)),)
HAVE_CUDA := 1
CFLAGS_BASE += -DKS_HAVE_CUDA
NVCCFLAGS ?= -O3 -std=c++17 -Isrc -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=sm_80 \
             -Xcompiler -fPIC
NVCC_DEFS := -DKS_HAVE_CUDA -DKS_CUBLASLT_DIR='"$(CUDA_HOME)/lib64"'
LDLIBS  += $(CUDART_STATIC) -ldl -lrt -lstdc++
else
$(warning nvcc found at $(NVCC) but no libcudart_static.a beside it: building CPU-only)
endif
endif
endif

LIB_SRCS  := $(filter-out src/cli/%,$(shell find src -name '*.c' | sort))
CLI_SRCS  := $(shell find src/cli -name '*.c' | sort)
TEST_SRCS := tests/runner.c $(sort $(wildcard tests/unit/*.c))
# CUDA kernels compiled for the host (tests/emu: their logic tested without a GPU)
EMU_SRCS  := $(sort $(wildcard tests/emu/*.cpp))
CXXFLAGS_EMU := -std=c++17 -Wall -Wextra -Wno-unknown-pragmas -Wno-unused-parameter -Itests/emu -Isrc -pthread \
                -fno-exceptions -fno-rtti -ffp-contract=off

LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(if $(HAVE_CUDA),$(CU_SRCS:%.cu=$(BUILD)/%.cu.o))
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/%.o)
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o) $(EMU_SRCS:%.cpp=$(BUILD)/%.o)

.PHONY: all debug test test-unit test-cli test-asan test-cuda clean bench
# the bench programs build with everything, so a change to the ops they call
# breaks the build (CI included), not the next device session
BENCH_BINS := $(BUILD)/cuda_ops_bench $(BUILD)/cpu_attention_bench $(BUILD)/cpu_matmul_bench $(BUILD)/token_mask_bench $(BUILD)/sample_bench
all: $(BUILD)/kestrel $(BUILD)/test_runner $(BENCH_BINS)

$(BUILD)/kestrel: $(CLI_OBJS) $(BUILD)/libkestrel.a
	$(CC) $(CFLAGS_BASE) $(OPT) $(CFLAGS) $(LDFLAGS) -o $@ $(CLI_OBJS) $(BUILD)/libkestrel.a $(LDLIBS)

$(BUILD)/libkestrel.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/test_runner: $(TEST_OBJS) $(BUILD)/libkestrel.a
	$(CC) $(CFLAGS_BASE) $(OPT) $(CFLAGS) $(LDFLAGS) -o $@ $(TEST_OBJS) -Wl,--whole-archive $(BUILD)/libkestrel.a -Wl,--no-whole-archive $(LDLIBS)

$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(OPT) $(CFLAGS) $(AVX2_FLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(OPT) $(CFLAGS) $(AVX512_FLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(OPT) $(CFLAGS) -Itests -MMD -MP -c -o $@ $<

$(BUILD)/tests/emu/%.o: tests/emu/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_EMU) $(OPT) -MMD -MP -c -o $@ $<

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(NVCC_DEFS) -MMD -MP -c -o $@ $<

debug:
	$(MAKE) BUILD=build-asan OPT="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined" \
	        LDFLAGS="-fsanitize=address,undefined" all

test: all
	scripts/run_tests.sh $(BUILD)

test-asan: debug
	ASAN_OPTIONS=detect_leaks=1 scripts/run_tests.sh build-asan

test-cuda: all
	scripts/run_tests_cuda.sh $(BUILD)

bench: all
	bench/cpu_bench.sh

$(BENCH_BINS): $(BUILD)/%: $(BUILD)/bench/%.o $(BUILD)/libkestrel.a
	$(CC) $(CFLAGS_BASE) $(OPT) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

clean:
	rm -rf build build-asan

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
