#!/usr/bin/env bash
# bench/gpu_session.sh OUT [STAGES] — one full run on the lent H200 (device
# time is scarce: build, test and benchmark in one call). Run from the repo
# root with .devcarry/ carried, as bench/make_devcarry.sh writes it
# (gpu.tar.xz: tinycoder + prompts + reference + dflash; drafter.tar.xz:
# tinycoder/drafter; qwen3tok.tar.xz: the Qwen3 tokenizer for the random
# checkpoints; libs.tar.xz: the Debian -dev headers and libraries the machine
# lacks, sysroot/ and runlib/, unpacked here). The device call: carry
# [".devcarry/gpu.tar.xz", ".devcarry/libs.tar.xz", ".devcarry/qwen3tok.tar.xz"]
# (+ ".devcarry/drafter.tar.xz" where the 64 MiB allow), command
# `timeout 590 bash bench/gpu_session.sh $OUT "STAGES"`. Everything lands in
# OUT.
# STAGES (default "test real spec"): test = `test_runner cuda`; real =
# random-weight Qwen3-8B / 1.7B checkpoints, decode after a 512-token prompt
# and prefill of a 4096-token prompt (NOPROMPT=1: also with the prompt path
# off, KESTREL_PROMPT_PATH=0), CUDA graphs and programmatic dependent launch
# on and off; profile = GPU time per op (KESTREL_CUDA_PROFILE) of a
# 4096-token prefill + 64 decoded tokens; ops = cuda_ops_bench (op timings
# at Qwen3-8B shapes, model_forward of 1 / 4 / 16 decode sequences); ncu =
# Nsight Compute sections for a few launches of NCU_KERNELS (default: the
# decode attention and the tensor-core matvec); spec = the proposer matrix on
# tinycoder; long = Qwen3-8B decode after 16,384- and 65,536-token prompts
# (LONG_TOKENS; since the forty-eighth session: ~16k and ~64k from the
# twenty-second, ~11k and ~48k before; LONG_STEPS=1 also a step-logged run
# each, its steady step period by bench/step_period.sh); batch =
# Qwen3-8B concurrency sweep, prefix-cache TTFT and the 32k-prompt stall;
# kprof = GPU time of each kernel of a Qwen3-8B decode step (Nsight Compute);
# mem = the server's GPU memory beyond weights and a 4 GiB KV pool
# (bench/gpu_memory.sh on Qwen3-8B); cadence = step_cadence.sh (forward vs step period,
# host work) on tinycoder and Qwen3-1.7B, plain decode; ab = the same
# plain decode runs (and cuda_ops_bench --attention) with this tree and with
# one more build per .devcarry/ab_NAME.tar.xz (bench/ab_overlay.sh writes
# them), whose files replace this tree's (also the decode and the prompt
# attention alone, cuda_ops_bench --attention / --prompt-attention, and the
# greedy argmax, --argmax; AB_OPS="attention prompt-attention argmax" by
# default, AB_OPS="" none) — variants measured against each other in one call,
# interleaved (AB_MODELS, AB_ROUNDS); AB_LONG="new NAME.." adds decode after
# 16,384 / 65,536-token prompts (AB_LONG_TOKENS; AB_LONG_ROUNDS interleaved rounds); AB_DRAFTER=1 Qwen3-8B drafted by Qwen3-1.7B and
# tinycoder by its drafter, 32 tokens after ~4k (the draft model's first
# catch-up; carry drafter.tar.xz); AB_FWD=1 model_forward of 1 / 4 / 16 sequences;
# AB_MATVEC=1 cuda_ops_bench --matvec; AB_SPEC="CONFIGS" the proposer bench (AB_SPEC_ROUNDS rounds, the trees interleaved; SPEC_FULL=1 at --full); AB_PREFILL=1 prefill of 3,712 / 4,096 / 4,115-token
# prompts (AB_PREFILL_TOKENS) on Qwen3-8B and 1.7B; AB_LADDER="19,64,256" a
# warm server's TTFT at those prompt sizes (bench.sh --workloads ladder,
# AB_LADDER_MODELS), each tree. AB_ENVS="NAME:VAR=V,VAR=V .." adds this
# tree run with those environment settings as more variants (one build,
# A/B of switches; in the decode rows and AB_LONG, where "new+NAME" names one).
# steplog = KESTREL_STEP_LOG of one tinycoder completion with MTP, with DFlash.
# e2e = the end-to-end suite (official npm clients) on the CUDA backend (node
# from .devcarry/node.tar.xz, see the stage). serve = the server's own tests on the CUDA backend: tests/cli/*.sh and the
# API fuzzer (FUZZ_SEEDS, FUZZ_N; then 600 requests from 8 clients).
# autolong = auto mode against plain on tinycoder after a ~4,700-token prompt
# (AUTOLONG_ROUNDS rounds, each ab tree): the gates' spread run to run;
# AUTOLONG_MODES picks among "auto plain dflash" (DFlash alone, its prefill).
# SPEC_FULL=1: the proposer matrix at --full size (5 prompts x 128 tokens).
# WANT_CARD=H200 (ELSE_STAGES="..."): the stages only on that card (see below).
# CONC_EXTRA='{"temperature":0.7}': the sweep's requests sampled (bench.sh --extra-json).
# CONC_MAX_TOKENS=N: the concurrency sweep's answers N tokens long (--quick:
# 64, where the 16 prompts' prefill is much of the measured time).
# batch also runs bench/step_cadence.sh (forward time vs step cadence by
# sequence count at up to 16 streams); BATCH_PARTS="sweep cadence stall"
# picks among its three parts. steps = every forward of Qwen3-8B prefills
# of 4,096 and 4,115 tokens, timed (KESTREL_STEP_LOG; STEPS_TOKENS,
# STEPS_MODELS; with each ab tree where the ab stage ran; STEPS_PROFILE=1
# adds the CUDA op profile of each run, graphs off);
# gemmsweep = bench/gemm_sweep.cu: cuBLASLt's candidates for the Qwen3-8B
# prompt GEMMs timed at 19 / 64 / 256 / 2,048 rows, row invariance and
# determinism checked. layerstream = bench/layer_stream.cu: a decode
# token's chain of matvecs (Qwen3-1.7B / 8B / tinycoder shapes) as one
# kernel a matvec against one persistent kernel with grid barriers, each
# against a stream of the same bytes (LAYERSTREAM_RUNS, MODEL:TOKENS:EXTRA).
# mvsweep = bench/matvec_sweep.cu: the tensor-core matvec's tile choices
# at the decode shapes of Qwen3-1.7B / 8B / tinycoder, 1 / 4 / 8 / 16
# tokens, weights from DRAM, outputs checked bitwise (MVSWEEP_SHAPES: a
# shape-name prefix, e.g. 1.7b; MVSWEEP_ARGS: "fold" and / or "l2", see
# the tool's header). json = Qwen3-8B chat decode plain against JSON mode
# (response_format json_object) against sampled (temperature 0.7 / top_p
# 0.95, temperature 1, temperature 0.8 / top_k 40 / top_p 0.9) against
# penalised (greedy with presence / frequency, sampled with a repetition
# penalty) against JSON mode sampled, interleaved twice: the constraint's
# cost, the sampler's (on the device since the thirty-seventh session),
# the penalties' and the sampled constraint's (on the device since the
# thirty-eighth); JSON_EXTRAS: the list (space-separated).
set -u
OUT=${1:?usage: bench/gpu_session.sh OUT [STAGES]}
STAGES=${2:-test real profile spec}
# WANT_CARD=H200: on another card run ELSE_STAGES instead, or (none given)
# nothing, exit 3 — the card comes with the machine, and a call that
# stops at once costs only its start
if [ -n "${WANT_CARD:-}" ] && ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q "$WANT_CARD"; then
    echo "the card is no $WANT_CARD: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
    [ -n "${ELSE_STAGES:-}" ] || exit 3
    STAGES=$ELSE_STAGES
fi
mkdir -p "$OUT" /tmp/sh
tar -xJf .devcarry/gpu.tar.xz -C /tmp/sh
[ -f .devcarry/libs.tar.xz ] && tar -xJf .devcarry/libs.tar.xz -C .devcarry
# tinycoder's draft model travels apart (.devcarry/drafter.tar.xz) to keep
# each file small; the spec stage's drafter row needs it
[ -f .devcarry/drafter.tar.xz ] && tar -xJf .devcarry/drafter.tar.xz -C /tmp/sh
export KESTREL_SHARED=/tmp/sh/shared LD_LIBRARY_PATH=$PWD/.devcarry/runlib
SR=$PWD/.devcarry/sysroot/usr
TC=/tmp/sh/shared/models/tinycoder
{ nvidia-smi -L; git rev-parse --short HEAD; } > "$OUT/build.log" 2>&1
t0=$(date +%s)
# make against the carried sysroot, for sm_90a (this tree and the ab stage's variants);
# NVCC and SM90 also build the standalone tools (gemmsweep, layerstream)
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc)
SM90="-gencode arch=compute_90a,code=sm_90a"
kmake() {
    make -j16 "$@" CFLAGS="-I$SR/include -I$SR/include/x86_64-linux-gnu" \
        LDFLAGS="-L$SR/lib/x86_64-linux-gnu -Wl,--allow-shlib-undefined" \
        NVCCFLAGS="-O3 -std=c++17 -Isrc $SM90 -Xcompiler -fPIC"
}
kmake all build/cuda_ops_bench >> "$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"

has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
# nvcc_kestrel OUTBIN SRC [NVCC FLAGS...]: a standalone tool linked with build/libkestrel.a and the carried libraries
nvcc_kestrel() {
    local bin=$1 src=$2; shift 2
    "$NVCC" -O3 -std=c++17 -Isrc $SM90 "$@" -o "$bin" "$src" build/libkestrel.a -L"$SR/lib/x86_64-linux-gnu" \
        -ljansson -lpcre2-8 -lutf8proc -lmicrohttpd -lcurl -lxxhash -ldl -lrt -Xlinker --allow-shlib-undefined
}
# a tree's name in the ab and steps stages: build is this tree ("new"), /tmp/ab_NAME/build an overlay's
tname() { [ "$1" = build ] && echo new || { local d=${1#/tmp/ab_}; echo ${d%/build}; }; }

# the random checkpoints get the Qwen3 tokenizer when it is carried
# (.devcarry/qwen3tok.tar.xz: random tokens then decode to text, which the
# server's streams and the bench's token counts need), else tinycoder's
QTOK=/tmp/qwen3tok
[ -f .devcarry/qwen3tok.tar.xz ] && tar -xJf .devcarry/qwen3tok.tar.xz -C /tmp
[ -f "$QTOK/tokenizer.json" ] || QTOK=$TC
# (NOCKPT=1: no random checkpoints, for stages run on tinycoder alone)
if [ -z "${NOCKPT:-}" ] && { has real || has ops || has batch || has json || has long || has profile || has kprof || has gprof || has mem || has cadence || has ab || has steps; }; then # written while the tests run
    ( python3 tools/make_random_checkpoint.py qwen3-8b /tmp/q8 --tokenizer-from "$QTOK" &&
      { has real || has profile || has cadence || has ab; } &&
      python3 tools/make_random_checkpoint.py qwen3-1.7b /tmp/q17 --tokenizer-from "$QTOK" ) > /tmp/checkpoints.log 2>&1 &
fi
# A variant "TREE|NAME|VAR=V,VAR=V": a build tree, its name in the output,
# the environment settings of its runs (the ab stage's trees and AB_ENVS,
# TEST_ENV, the long runs)
vname() { local r=${1#*|}; echo "${r%%|*}"; } # VARIANT: its name
vrun() { # VARIANT PROGRAM ARGS..: TREE/PROGRAM with the variant's settings (VRUN_TIMEOUT=S: killed after S s)
    local b=${1%%|*} r=${1#*|} prog=$2 tmo=${VRUN_TIMEOUT:-}
    shift 2
    r=${r#*|}
    env ${r//,/ } ${tmo:+timeout $tmo} "$b/$prog" "$@"
}
if has test; then
    t0=$(date +%s)
    vrun "build||${TEST_ENV:-}" test_runner cuda > "$OUT/test_cuda.txt" 2>&1 # (TEST_ENV="VAR=V,..": settings for it)
    echo "test_runner cuda: rc $? in $(( $(date +%s) - t0 )) s"
    grep -E "^(FAIL|ok|SKIP)" "$OUT/test_cuda.txt" | grep -v "^ok" | head -20
    grep -c "^ok" "$OUT/test_cuda.txt"
fi
wait
cat src/model/llama.c src/engine/engine_sched.c src/engine/engine_seq.c src/model/dflash.c src/engine/engine.c > /tmp/src.txt
rm -f /tmp/prompt_*.txt /tmp/long_*.txt # (prompt_of_tokens, long_text: this call's source, not a warm machine's last)
cat $(git ls-files 'src/*.c' 'src/*.h' 'src/*.cu' 'tests/*.c' 'docs/*.md' 2>/dev/null || find src tests docs -type f) > /tmp/all.txt
# chars_for_tokens N [FILE]: the shortest prefix of FILE (/tmp/src.txt;
# characters) that is at least N Qwen3 tokens (bisection; `kestrel run -p` feeds these
# checkpoints' prompts as raw text, so its prompt count is the same)
chars_for_tokens() {
    local lo=1 hi=$(( $1 * 6 )) mid n
    while [ $lo -lt $hi ]; do
        mid=$(( (lo + hi) / 2 ))
        n=$(head -c $mid "${2:-/tmp/src.txt}" | build/kestrel tokenize "$QTOK" - | tr -cd , | wc -c)
        if [ $(( n + 1 )) -lt $1 ]; then lo=$(( mid + 1 )); else hi=$mid; fi
    done
    echo $lo
}
# prompt_of_tokens N: that prefix itself, bisected once per N (kept in /tmp)
prompt_of_tokens() {
    [ -f /tmp/prompt_$1.txt ] || head -c $(chars_for_tokens $1) /tmp/src.txt > /tmp/prompt_$1.txt
    cat /tmp/prompt_$1.txt
}
# long_text N: the shortest prefix of the source tree as text (/tmp/all.txt)
# that is at least N Qwen3 tokens, in /tmp/long_N.txt (bisected once per N; ~3.7
# characters a token)
long_text() {
    [ -f /tmp/long_$1.txt ] || head -c $(chars_for_tokens $1 /tmp/all.txt) /tmp/all.txt > /tmp/long_$1.txt
}
# long_decode VARIANT N: its "kestrel: prompt" line for Qwen3-8B decoding 128
# tokens after an N-token prompt (long_text; the long stage and AB_LONG,
# whose rows before the forty-eighth session took ~3.6 characters a token
# for N: 16000 was 15,3xx tokens; --no-pld: a random model's answers repeat
# its context now and then, and accepted drafts would count as decode speed)
long_run() { # VARIANT N: that run's stderr (the environment's KESTREL_STEP_LOG too)
    long_text $2
    VRUN_TIMEOUT=240 vrun "$1" kestrel run /tmp/q8 -p - -n 128 --temp 0 --ignore-eos --device cuda --no-pld \
        < /tmp/long_$2.txt 2>&1 >/dev/null
}
long_decode() { long_run "$@" | grep "kestrel: prompt"; }
if has real; then
    p512=$(head -c 1378 /tmp/src.txt)
    p4k=$(prompt_of_tokens 4096) # (4,096 Qwen3 tokens; 3,712 before the twenty-third session)
    run() { # LABEL ENV... -- MODEL PROMPT N
        local label=$1; shift
        local envs=()
        while [ "$1" != "--" ]; do envs+=("$1"); shift; done
        shift
        local line
        line=$(env "${envs[@]}" build/kestrel run "$1" -p "$2" -n "$3" --temp 0 --ignore-eos --device cuda 2>&1 >/dev/null | grep "kestrel: prompt")
        echo "$label: $line" | tee -a "$OUT/real.txt"
    }
    for M in /tmp/q8 /tmp/q17 "$TC"; do
        [ -f "$M/config.json" ] || { echo "no checkpoint $M (see checkpoints.log)"; continue; }
        run "$M prefill4k prompt-path" X=1 -- "$M" "$p4k" 16
        run "$M prefill4k no-pdl" KESTREL_CUDA_PDL=0 -- "$M" "$p4k" 16
        [ -n "${NOPROMPT:-}" ] && run "$M prefill4k no-prompt-path" KESTREL_PROMPT_PATH=0 -- "$M" "$p4k" 16
        run "$M decode512 graphs" X=1 -- "$M" "$p512" 256
        run "$M decode512 graphs again" X=1 -- "$M" "$p512" 256
        run "$M decode512 no-graphs" KESTREL_CUDA_GRAPHS=0 -- "$M" "$p512" 256
        run "$M decode512 no-pdl" KESTREL_CUDA_PDL=0 -- "$M" "$p512" 256
    done
fi
if has ops; then # op timings at Qwen3-8B shapes; model_forward of 1 / 4 / 16 decode sequences
    { build/cuda_ops_bench; build/cuda_ops_bench /tmp/q8; } > "$OUT/ops.txt" 2>&1
    for v in ${TC_VARIANTS:-}; do # KESTREL_TC_VARIANT candidates of the tensor-core matvec: exactness, then speed
        { echo "== KESTREL_TC_VARIANT=$v"; KESTREL_TC_VARIANT=$v ./build/test_runner cuda_matmul | tail -1
          KESTREL_TC_VARIANT=$v build/cuda_ops_bench; KESTREL_TC_VARIANT=$v build/cuda_ops_bench /tmp/q8; } 2>&1 | grep "==\|passed\|matmul.*n=\(1\|4\|16\) \|forward" >> "$OUT/ops.txt"
    done
    grep "forward\|matmul.*n=\(1\|16\) \|==\|attention\|^gemm" "$OUT/ops.txt"
fi
if has ncu; then # Nsight Compute on launches of the kernels named by NCU_KERNELS (regex) of NCU_CMD
    # NCU_SKIPS: the launch indexes to start at (one profile each), NCU_COUNT launches from each
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
    if [ -n "$NCU" ]; then
        for skip in ${NCU_SKIPS:-20}; do
            timeout 200 "$NCU" --kernel-name "regex:${NCU_KERNELS:-k_attn_decode|k_matvec_tc}" --launch-skip $skip \
                --launch-count ${NCU_COUNT:-6} --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
                --section LaunchStats --section WarpStateStats ${NCU_CMD:-build/cuda_ops_bench} >> "$OUT/ncu.txt" 2>&1
        done
        grep -E "k_attn|k_matvec|Duration|Memory Throughput|Achieved Occupancy|DRAM Throughput|Stall|Warp Cycles Per Issued" "$OUT/ncu.txt" | head -80
    else
        echo "ncu: not on this machine"
    fi
fi
if has long; then # Qwen3-8B decode after 16k and 64k tokens of context (LONG_TOKENS; ~16,000 / ~64,000 before the forty-eighth session)
    for n in ${LONG_TOKENS:-16384 65536}; do
        [ -f /tmp/q8/config.json ] || break
        echo "/tmp/q8 context ~$n: $(long_decode "build||" $n)" | tee -a "$OUT/real.txt"
        # LONG_STEPS=1: one more run, step-logged, for its steady decode rate (bench/step_period.sh)
        [ -n "${LONG_STEPS:-}" ] && KESTREL_STEP_LOG=1 long_run "build||" $n | grep "kestrel: step\|kestrel: prompt" |
            tee "$OUT/long_steps_$n.txt" | bench/step_period.sh | sed "s|^|/tmp/q8 context ~$n, |" | tee -a "$OUT/real.txt"
    done
fi
if has batch; then # issue 7 on the GPU: streams 1/4/16 on Qwen3-8B; prefix-cache TTFT and the 32k stall
    # BATCH_PARTS: which of "sweep cadence stall" to run (default all three)
    bp=" ${BATCH_PARTS:-sweep cadence stall} "
    if [ -f /tmp/q8/config.json ]; then
        [[ $bp == *" sweep "* ]] && {
        KESTREL=build/kestrel timeout 240 bash bench/bench.sh /tmp/q8 --quick --workloads concurrency --ignore-eos \
            ${CONC_MAX_TOKENS:+--max-tokens $CONC_MAX_TOKENS} ${CONC_EXTRA:+--extra-json "$CONC_EXTRA"} \
            --prompts /tmp/sh/shared/models/tinycoder/prompts -- --device cuda --no-pld > "$OUT/batch.txt" 2>&1
        grep -i "stream\|concurr" "$OUT/batch.txt" | tail -12; }
        [[ $bp == *" cadence "* ]] &&
        KESTREL=build/kestrel PROMPTS=/tmp/sh/shared/models/tinycoder/prompts timeout 200 bash bench/step_cadence.sh /tmp/q8 -- \
            --device cuda --no-pld --max-concurrent 16 2>&1 | grep -E " (1|4|8|16) sequences" | tee -a "$OUT/batch.txt"
        [[ $bp == *" stall "* ]] && {
        KESTREL=build/kestrel PREFIX=8192 LONG=32768 timeout 240 bash bench/cache_stall_bench.sh /tmp/q8 -- \
            --device cuda --ctx-size 40000 --max-concurrent 4 --no-pld >> "$OUT/batch.txt" 2>&1
        tail -4 "$OUT/batch.txt"; }
    fi
fi
if has json && [ -f /tmp/q8/config.json ]; then # structured output's cost on the GPU: Qwen3-8B chat, plain vs JSON mode, interleaved
    JSON_EXTRAS=${JSON_EXTRAS:-'{} {"response_format":{"type":"json_object"}} {"temperature":0.7,"top_p":0.95} {"temperature":1} {"temperature":0.8,"top_k":40,"top_p":0.9} {"frequency_penalty":0.5,"presence_penalty":0.5} {"temperature":0.7,"top_p":0.95,"repetition_penalty":1.1} {"response_format":{"type":"json_object"},"temperature":0.7,"top_p":0.95}'}
    for r in 1 2; do for x in $JSON_EXTRAS; do
        echo "== round $r extra $x" >> "$OUT/json.txt"
        KESTREL=build/kestrel timeout 120 bash bench/bench.sh /tmp/q8 --quick --workloads chat --max-tokens 128 \
            --extra-json "$x" --prompts /tmp/sh/shared/models/tinycoder/prompts -- --device cuda --no-pld >> "$OUT/json.txt" 2>&1
    done; done
    grep -E "^==|chat" "$OUT/json.txt" | head -40
fi
if has mem; then # issue 4's memory goal: GPU memory beyond weights + KV pool
    [ -f /tmp/q8/config.json ] && timeout 150 bash bench/gpu_memory.sh /tmp/q8 4G 2>&1 | tee -a "$OUT/mem.txt"
fi
if has profile; then # GPU time per op (KESTREL_CUDA_PROFILE, graphs off): a 4096-token prefill (PROFILE_TOKENS) + 64 tokens
    # PROFILE_VARIANTS: ';'-separated "ENV=V ... [-- kestrel flags]" runs of the first model (default: one plain run)
    IFS=';' read -ra variants <<< "${PROFILE_VARIANTS:-X=1}"
    for M in ${PROFILE_MODELS:-/tmp/q8 /tmp/q17 $TC}; do
        [ -f "$M/config.json" ] || continue
        b=$(basename "$M")
        for v in "${variants[@]}"; do
            envs=${v%%--*}; flags=; [ "$envs" != "$v" ] && flags=${v#*--}
            for ntok in ${PROFILE_TOKENS:-4096}; do # (PROFILE_N: tokens decoded after the prompt, default 64)
                env $envs KESTREL_CUDA_PROFILE=1 KESTREL_CUDA_GRAPHS=0 build/kestrel run "$M" \
                    -p "$(prompt_of_tokens $ntok)" -n ${PROFILE_N:-64} --temp 0 --ignore-eos \
                    --device cuda $flags 2>&1 >/dev/null | grep -A30 "kestrel: prompt" > "/tmp/profile_$b.txt"
                { echo "== $b $ntok tokens ($v)"; cat "/tmp/profile_$b.txt"; } | tee -a "$OUT/profile.txt"
            done
        done
        [ -n "${PROFILE_VARIANTS:-}" ] && break
    done
fi
if has kprof; then # GPU time of every kernel of one Qwen3-8B decode step (Nsight Compute, each kernel alone)
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
    if [ -n "$NCU" ] && [ -f /tmp/q8/config.json ]; then
        # KPROF_CMD / KPROF_KERNELS: another command (e.g. "build/cuda_ops_bench /tmp/q8 16", 16 batched
        # sequences) and a kernel-name regex the skip and count apply to
        kcmd=(build/kestrel run /tmp/q8 -p "$(head -c 1378 /tmp/src.txt)" -n 16 --temp 0 --ignore-eos --device cuda)
        [ -n "${KPROF_CMD:-}" ] && read -ra kcmd <<< "$KPROF_CMD"
        KESTREL_CUDA_GRAPHS=0 timeout 300 "$NCU" --metrics gpu__time_duration.sum --csv --launch-skip ${KPROF_SKIP:-3000} \
            --launch-count ${KPROF_COUNT:-420} ${KPROF_KERNELS:+--kernel-name "regex:$KPROF_KERNELS"} "${kcmd[@]}" \
            2>/dev/null > /tmp/kprof.csv
        python3 bench/ncu_table.py /tmp/kprof.csv | tee -a "$OUT/kprof.txt"
    else
        echo "kprof: no ncu or no checkpoint"
    fi
fi
if has gprof; then # GPU time of each prompt-path kernel (GEMMs, prompt attention) in a Qwen3-8B prefill vs cuda_ops_bench
    NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
    if [ -n "$NCU" ] && [ -f /tmp/q8/config.json ]; then
        p4k=$(head -c 11030 /tmp/src.txt)
        for cmd in kestrel cuda_ops_bench; do
            args=(build/cuda_ops_bench)
            [ $cmd = kestrel ] && args=(build/kestrel run /tmp/q8 -n 1 --temp 0 --ignore-eos --device cuda -p "$p4k")
            KESTREL_CUDA_GRAPHS=0 timeout 200 "$NCU" --clock-control none --kernel-name "regex:gemm|nvjet|cutlass|xmma|k_attn_prompt|k_to_16" \
                --launch-count ${GPROF_COUNT:-160} --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second --csv \
                "${args[@]}" 2>/dev/null > /tmp/gprof.csv
            echo "== $cmd" | tee -a "$OUT/gprof.txt"
            python3 bench/ncu_table.py /tmp/gprof.csv --by-block | tee -a "$OUT/gprof.txt"
        done
    else
        echo "gprof: no ncu or no checkpoint"
    fi
fi
if has ab; then # this tree ("new") against each overlay .devcarry/ab_NAME.tar.xz, interleaved
    trees=(build)
    for ov in .devcarry/ab_*.tar.xz; do
        [ -f "$ov" ] || continue
        name=$(basename "$ov" .tar.xz); name=${name#ab_}
        rm -rf /tmp/ab_$name && mkdir -p /tmp/ab_$name && cp -r src tests bench tools Makefile /tmp/ab_$name/
        tar -xJf "$ov" -C /tmp/ab_$name --strip-components=1
        ( cd /tmp/ab_$name && kmake build/kestrel build/cuda_ops_bench > /tmp/abbuild_$name.log 2>&1 ) &&
            trees+=(/tmp/ab_$name/build) || tail -20 /tmp/abbuild_$name.log
        if [ "${AB_TEST:-}" = 1 ] || case " ${AB_TEST:-} " in *" $name "*) true ;; *) false ;; esac; then # the variant's own CUDA tests (AB_TEST=1: every variant's; AB_TEST="NAME..": those)
            ( cd /tmp/ab_$name && kmake build/test_runner > /dev/null 2>&1 &&
              { ./build/test_runner cuda > /tmp/t_$name.txt 2>&1; echo "ab $name tests: $(grep -c '^ok' /tmp/t_$name.txt) ok,"\
                "$(grep -c '^FAIL' /tmp/t_$name.txt) failed"; grep '^FAIL' /tmp/t_$name.txt | head -5; } ) | tee -a "$OUT/ab.txt"
        fi
    done
    p512=$(head -c 1378 /tmp/src.txt)
    # the variants: each tree as built ("TREE|NAME|"), then this tree under each AB_ENVS setting
    variants=()
    for b in "${trees[@]}"; do variants+=("$b|$(tname $b)|"); done
    for ev in ${AB_ENVS:-}; do variants+=("build|new+${ev%%:*}|${ev#*:}"); done
    for M in ${AB_MODELS:-/tmp/q8 /tmp/q17 $TC}; do
        [ -f "$M/config.json" ] || continue
        for round in $(seq ${AB_ROUNDS:-2}); do
            for v in "${variants[@]}"; do
                vn=$(vname "$v")
                line=$(vrun "$v" kestrel run "$M" -p "$p512" -n 256 --temp 0 --ignore-eos --device cuda --no-pld --no-mtp --no-drafter \
                    2>&1 >/dev/null | grep "kestrel: prompt" | sed 's/ (cuda.*//')
                echo "ab $(basename $M) $vn $round: $line" | tee -a "$OUT/ab.txt"
            done
        done
    done
    if [ -n "${AB_PREFILL:-}" ]; then # prefill of 3,712 / 4,096 / 4,115-token prompts (AB_PREFILL_TOKENS), Qwen3-8B and 1.7B, interleaved
        for M in /tmp/q8 /tmp/q17; do
            [ -f "$M/config.json" ] || continue
            for ntok in ${AB_PREFILL_TOKENS:-3712 4096 4115}; do
                p4k=$(prompt_of_tokens $ntok)
                for round in $(seq ${AB_ROUNDS:-2}); do
                    for b in "${trees[@]}"; do
                        line=$($b/kestrel run "$M" -p "$p4k" -n 16 --temp 0 --ignore-eos --device cuda --no-pld 2>&1 >/dev/null |
                            grep "kestrel: prompt" | sed 's/ (cuda.*//')
                        echo "ab prefill $(basename $M) $(tname $b) $round: $line" | tee -a "$OUT/ab.txt"
                    done
                done
            done
        done
    fi
    if [ -n "${AB_LADDER:-}" ]; then # a warm server's TTFT by prompt size (bench.sh's context ladder, AB_LADDER="19,64,256"), each tree
        for M in ${AB_LADDER_MODELS:-/tmp/q8 /tmp/q17}; do
            [ -f "$M/config.json" ] || continue
            for b in "${trees[@]}"; do
                # (bench.sh writes its tables to bench/results/*.md and names them on stderr; --no-pld: no spec on/off boots)
                log="$OUT/ladder-$(basename $M)-$(tname $b).log"
                KESTREL=$b/kestrel timeout 300 bash bench/bench.sh "$M" --quick --workloads ladder --ladder "$AB_LADDER" \
                    --prompts /tmp/sh/shared/models/tinycoder/prompts \
                    -- --device cuda --no-pld > /dev/null 2> "$log"
                md=$(grep -o 'bench/results/[^ ]*\.md' "$log" | head -1)
                [ -n "$md" ] && grep -E "^\| [0-9]+ \| [0-9,.]+ \| 200 \|" "$md" |
                    sed "s|^|ab ladder $(basename $M) $(tname $b) |" | tee -a "$OUT/ab.txt"
            done
        done
    fi
    for v in "${variants[@]}"; do # the kernels alone (AB_OPS): decode attention over a pool of 128k tokens, ...
        vn=$(vname "$v")
        for op in ${AB_OPS-attention prompt-attention argmax}; do
            case $op in
                attention) vrun "$v" cuda_ops_bench --attention 131072 | grep attention ;;
                prompt-attention) vrun "$v" cuda_ops_bench --prompt-attention | grep attention ;;
                argmax) vrun "$v" cuda_ops_bench --argmax | grep -E "^(argmax|penalize|mask|logprobs)" ;;
                *) echo "AB_OPS: $op is not attention, prompt-attention or argmax" >&2 ;;
            esac | sed "s|^|ab $vn |" | tee -a "$OUT/ab.txt"
        done
    done
    if [ -n "${AB_SPEC:-}" ]; then # the proposer matrix on tinycoder (AB_SPEC: its CONFIGS), the trees interleaved
        for round in $(seq ${AB_SPEC_ROUNDS:-1}); do # (SPEC_FULL=1: --full; WORKLOADS narrows)
            for b in "${trees[@]}"; do
                KESTREL=$b/kestrel CONFIGS="$AB_SPEC" timeout 200 bash bench/proposer_bench.sh "$TC" ${SPEC_FULL:+--full} \
                    -- --device cuda 2>/dev/null | grep "^|" | sed "s|^|ab $(tname $b) $round |" | tee -a "$OUT/ab.txt"
            done
        done
    fi
    if [ -n "${AB_MATVEC:-}" ]; then # the decode matvecs alone (bench/decode_shapes.h), 1 / 4 / 16 tokens
        for b in "${trees[@]}"; do
            $b/cuda_ops_bench --matvec | grep matvec | sed "s|^|ab $(tname $b) |" | tee -a "$OUT/ab.txt"
        done
    fi
    if [ -n "${AB_FWD:-}" ] && [ -f /tmp/q8/config.json ]; then # Qwen3-8B model_forward of 1 / 4 / 16 decode sequences
        for b in "${trees[@]}"; do
            $b/cuda_ops_bench /tmp/q8 2>&1 | grep "forward decode" | sed "s|^|ab $(tname $b) |" | tee -a "$OUT/ab.txt"
        done
    fi
    if [ -n "${AB_DRAFTER:-}" ]; then # a draft model's first proposal after a long prompt (its catch-up), the trees interleaved
        p4k=$(head -c 15000 /tmp/all.txt)
        for round in $(seq ${AB_ROUNDS:-2}); do
            for b in "${trees[@]}"; do
                for M in "/tmp/q8 --drafter /tmp/q17" "$TC --drafter $TC/drafter --no-mtp"; do
                    [ -f "${M%% *}/config.json" ] || continue
                    md=$(timeout 60 $b/kestrel run $M -p "$p4k" -n 32 --temp 0 --ignore-eos --device cuda 2>/tmp/dr_err.txt | md5sum | cut -c1-8)
                    echo "ab drafter $(basename ${M%% *}) $(tname $b) $round: stdout $md, $(grep 'kestrel: prompt' /tmp/dr_err.txt | sed 's/ (cuda[^;]*;/;/')" |
                        tee -a "$OUT/ab.txt"
                done
            done
        done
    fi
    if [ -n "${AB_LONG:-}" ] && [ -f /tmp/q8/config.json ]; then # Qwen3-8B decode after ~16k and ~64k tokens
        for n in ${AB_LONG_TOKENS:-16384 65536}; do
            for round in $(seq ${AB_LONG_ROUNDS:-1}); do # (the trees interleaved)
                for v in "${variants[@]}"; do
                    vn=$(vname "$v")
                    case " ${AB_LONG} " in *" $vn "*) ;; *) continue ;; esac
                    echo "ab q8 context ~$n $vn${AB_LONG_ROUNDS:+ $round}: $(long_decode "$v" $n | sed 's/ (cuda.*//')" | tee -a "$OUT/ab.txt"
                done
            done
        done
    fi
fi
if has cadence; then # forward time vs step period, plain decode, one to 16 streams
    for M in $TC /tmp/q17; do
        [ -f "$M/config.json" ] || continue
        KESTREL=build/kestrel PROMPTS=/tmp/sh/shared/models/tinycoder/prompts timeout 150 bash bench/step_cadence.sh "$M" -- \
            --device cuda --no-pld --no-mtp --no-drafter --max-concurrent 16 2>&1 | sed "s|^|$(basename $M) |" | tee -a "$OUT/cadence.txt"
    done
fi
if has gemmsweep; then # cuBLASLt candidates for the Qwen3-8B prompt GEMMs at 19 / 64 / 256 / 2,048 rows (bench/gemm_sweep.cu)
    CUDA_LIB=$(dirname "$(readlink -f "$NVCC")")/../lib64
    "$NVCC" -O2 -std=c++17 -Isrc $SM90 -o build/gemm_sweep bench/gemm_sweep.cu \
        -L"$CUDA_LIB" -lcublasLt -Xlinker -rpath -Xlinker "$CUDA_LIB" > "$OUT/gemmsweep_build.log" 2>&1 &&
        timeout 240 build/gemm_sweep ${GEMMSWEEP_MAX:-12} | tee "$OUT/gemmsweep.txt"
fi
if has layerstream; then # a kernel boundary's cost, launches against a persistent kernel (bench/layer_stream.cu)
    # with kestrel's own matvecs as one more variant (linked with libkestrel.a), else standalone
    { nvcc_kestrel build/layer_stream bench/layer_stream.cu -DKS_WITH_KESTREL ||
      "$NVCC" -O3 -std=c++17 -Isrc $SM90 -o build/layer_stream bench/layer_stream.cu; } \
        > "$OUT/layerstream_build.log" 2>&1 &&
        for run in ${LAYERSTREAM_RUNS:-1.7b:200:2 8b:100:2 tiny:500:2 1.7b:200:0}; do # MODEL:TOKENS:EXTRA
            timeout 120 build/layer_stream ${run//:/ }; done | tee "$OUT/layerstream.txt"
fi
if has mvsweep; then # the tensor-core matvec's tile choices against each other and its rule (bench/matvec_sweep.cu)
    nvcc_kestrel build/matvec_sweep bench/matvec_sweep.cu -diag-suppress 550 > "$OUT/mvsweep_build.log" 2>&1 &&
        timeout 300 build/matvec_sweep "${MVSWEEP_SHAPES:-}" ${MVSWEEP_ARGS:-} | tee "$OUT/mvsweep.txt"
fi
if has steps; then # each forward of prefills of STEPS_TOKENS tokens (default 4096 4115: a 19-row third chunk), timed
    # (KESTREL_STEP_LOG), STEPS_ROUNDS rounds, on STEPS_MODELS (default Qwen3-8B), with each ab tree where the ab stage ran
    for M in ${STEPS_MODELS:-/tmp/q8}; do
        for round in $(seq ${STEPS_ROUNDS:-2}); do
            for ntok in ${STEPS_TOKENS:-4096 4115}; do
                for b in "${trees[@]:-build}"; do
                    echo "== $(basename $M) $ntok tokens, $(tname $b), round $round" | tee -a "$OUT/steps.txt"
                    env KESTREL_STEP_LOG=1 ${STEPS_PROFILE:+KESTREL_CUDA_PROFILE=1 KESTREL_CUDA_GRAPHS=0} $b/kestrel run $M \
                        -p "$(prompt_of_tokens $ntok)" -n 2 --temp 0 --ignore-eos --device cuda --no-pld 2>&1 >/dev/null |
                        grep "kestrel: \(step\|prompt\|CUDA op\)\|^  [a-z]" | sed 's/ (cuda.*//' | tee -a "$OUT/steps.txt"
                done
            done
        done
    done
fi
if has autolong; then # auto mode (every proposer, gates on) on tinycoder after the first 15,000 characters of the sources
    # (~4,700 tokens), 256 tokens, against
    # plain, AUTOLONG_ROUNDS rounds (default 5), each ab tree where the ab stage ran: the gates' closings and back-offs
    # follow measured costs, so the rounds show the spread (session 31: 1 run in 5 at plain speed)
    p4k=$(head -c 15000 /tmp/all.txt)
    for round in $(seq ${AUTOLONG_ROUNDS:-5}); do
        for b in "${trees[@]:-build}"; do
            for mode in ${AUTOLONG_MODES:-auto plain}; do
                case $mode in plain) flags="--no-pld --no-mtp --no-drafter" ;; dflash) flags="--drafter $TC/dflash --no-pld --no-mtp" ;; *) flags= ;; esac
                md=$(timeout 120 $b/kestrel run $TC -p "$p4k" -n 256 --temp 0 --ignore-eos --device cuda $flags \
                    2>/tmp/al_err.txt | md5sum | cut -c1-8)
                echo "autolong $(tname $b) $round $mode: stdout $md, $(grep -o 'prompt [0-9]* tokens, [0-9.]* tok/s; decode [0-9]* tokens, [0-9.]* tok/s' /tmp/al_err.txt); $(grep -o 'speculation: .*' /tmp/al_err.txt)" |
                    tee -a "$OUT/autolong.txt"
            done
        done
    done
fi
if has e2e; then # the end-to-end suite (official npm clients) against the CUDA backend on tinycoder; node and the
    # clients from .devcarry/node.tar.xz (bench/make_devcarry.sh --node), unpacked into .devcarry/e2e by this call or
    # an earlier one on this warm machine (gpu.tar.xz + node.tar.xz pass the 64 MiB a call carries)
    [ -f .devcarry/node.tar.xz ] && mkdir -p .devcarry/e2e && tar -xJf .devcarry/node.tar.xz -C .devcarry/e2e
    if [ -x .devcarry/e2e/bin/node ] && [ -f "$TC/config.json" ]; then
        rm -rf tests/e2e/node_modules && cp -a .devcarry/e2e/node_modules tests/e2e/ &&
            touch tests/e2e/node_modules/.package-lock.json # (installed: run_e2e.sh needs no npm)
        PATH=$PWD/.devcarry/e2e/bin:$PATH timeout 900 bash scripts/run_e2e.sh build/kestrel > "$OUT/e2e.txt" 2>&1
        grep -E "^not ok|^✖|e2e:" "$OUT/e2e.txt" | head -40
    else
        echo "e2e: no node (.devcarry/e2e/bin/node) or no tinycoder ($TC): not run"
    fi
fi
if has serve; then # the server's own tests on the CUDA backend (the default where a GPU is): tests/cli/*.sh, then the API fuzzer (FUZZ_SEEDS, FUZZ_N requests each; one run from 8 clients)
    # the carried libraries for kestrel alone: the tests' curl is the machine's, with its own libcurl
    mkdir -p /tmp/kwrap
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$LD_LIBRARY_PATH" "$PWD/build/kestrel" > /tmp/kwrap/kestrel
    chmod +x /tmp/kwrap/kestrel
    { for t in tests/cli/*.sh; do
          if env -u LD_LIBRARY_PATH KESTREL=/tmp/kwrap/kestrel timeout 600 bash "$t" > /tmp/serve_cli.txt 2>&1; then r=ok; else r=FAIL; fi
          echo "serve cli $r $t: $(tail -1 /tmp/serve_cli.txt)"
          [ $r = FAIL ] && sed 's/^/    /' /tmp/serve_cli.txt
      done
      ( . scripts/lib/serve.sh
        KESTREL=build/kestrel MODEL=$TC start_server fuzz /tmp/serve_fuzz.log --ctx-size 1024
        grep -m1 "serving" /tmp/serve_fuzz.log
        fuzz() { # LABEL ARGS..: one api_fuzz.py run against the server, its failures shown
            timeout 300 python3 tests/fuzz/api_fuzz.py --url "http://127.0.0.1:$port" --server-log /tmp/serve_fuzz.log "${@:2}" \
                > /tmp/serve_fz.txt 2>&1 || grep -B2 -A12 FAIL /tmp/serve_fz.txt | head -80 | sed 's/^/    /'
            echo "serve fuzz $1: $(tail -1 /tmp/serve_fz.txt)"
        }
        for sd in ${FUZZ_SEEDS:-42 101 202 303}; do fuzz "seed $sd" -n ${FUZZ_N:-1200} --seed $sd; done
        fuzz "seed 43, 8 clients" -n 600 --seed 43 --threads 8
        kill -0 $srv 2> /dev/null && echo "serve fuzz: the server still serves" || echo "serve fuzz: FAIL the server is gone"
        kill $srv; wait $srv; echo "serve fuzz: server exit $?"
        grep -i "error\|assert\|abort\|cuda" /tmp/serve_fuzz.log | sort | uniq -c | sort -rn | head -20 | sed 's/^/    log: /' ) 2>&1
    } | tee "$OUT/serve.txt" | grep -v "^    "
fi
if has steplog; then # every forward and proposer pass of one code completion, timed (KESTREL_STEP_LOG), MTP and DFlash
    pc=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["prompt"])' "$TC/prompts/completion.jsonl")
    for f in "mtp --mtp --no-pld --no-drafter" "dflash --drafter $TC/dflash --no-pld --no-mtp"; do
        KESTREL_STEP_LOG=1 build/kestrel run "$TC" -p "$pc" -n 128 --temp 0 --device cuda ${f#* } 2>&1 >/dev/null |
            grep "kestrel:" > "$OUT/steplog_${f%% *}.txt"
        tail -3 "$OUT/steplog_${f%% *}.txt"
    done
fi
if has spec; then
    for f in "--mtp --no-pld" "--drafter $TC/dflash --no-pld --no-mtp"; do # the measured pass costs
        build/kestrel run "$TC" -p "$(head -c 1378 /tmp/src.txt)" -n 128 --temp 0 --device cuda $f 2>&1 >/dev/null |
            grep "measured costs\|kestrel: prompt" | tee -a "$OUT/spec.txt"
    done
    [ -n "${SPEC_NOGATES:-}" ] && KESTREL=build/kestrel NOGATES=1 WORKLOADS=code CONFIGS="mtp dflash" timeout 200 \
        bash bench/proposer_bench.sh "$TC" -- --device cuda >> "$OUT/spec.txt" 2>&1
    KESTREL=build/kestrel CONFIGS="${SPEC_CONFIGS:-plain pld mtp drafter dflash dflash8 auto}" timeout 300 \
        bash bench/proposer_bench.sh "$TC" ${SPEC_FULL:+--full} -- --device cuda >> "$OUT/spec.txt" 2>&1
    tail -8 "$OUT/spec.txt"
fi
