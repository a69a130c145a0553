#!/usr/bin/env bash
# bad_input.sh — hostile model directories and arguments never crash
# `kestrel run`: each gives exactly one line on stderr naming the file (and
# tensor/field), a non-zero exit status, and no signal. Built from the tiny
# Llama 3 fixture (f32 weights) and a minimal tokenizer.json.
set -uo pipefail
KESTREL=${KESTREL:-build/kestrel}
cd "$(dirname "$0")/../.."
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail=0

make_model() { # make_model DIR: a valid model directory
    mkdir -p "$1"
    cp tests/fixtures/tiny/llama3/config.json tests/fixtures/tiny/llama3/model.safetensors "$1/"
    cat > "$1/tokenizer.json" <<'JSON'
{"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null, "post_processor": null,
 "decoder": null, "model": {"type": "BPE", "vocab": {"a": 3, "b": 4, "ab": 5, "c": 6}, "merges": ["a b"]}}
JSON
    chmod u+w "$1"/*
}

# expect NAME PATTERN CMD...: CMD fails (exit 1 or 2, not a signal), stderr is one
# line matching PATTERN (grep -E).
expect() {
    local name=$1 pat=$2; shift 2
    "$@" > "$work/out" 2> "$work/err"
    local rc=$?
    local lines; lines=$(grep -c . "$work/err")
    if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then
        echo "    FAIL $name: exit status $rc"; fail=1
    elif [ "$lines" -ne 1 ] || ! grep -Eq -- "$pat" "$work/err"; then
        echo "    FAIL $name: stderr ($lines lines) does not match /$pat/:"; sed 's/^/      /' "$work/err"; fail=1
    else
        echo "    ok   $name: $(cat "$work/err")"
    fi
}

# a valid model runs (sanity: the fixtures below differ from it in one thing)
make_model "$work/good"
if ! "$KESTREL" run "$work/good" -p "abc" -n 4 --temp 0 > /dev/null 2> "$work/err"; then
    echo "    FAIL valid tiny model does not run:"; cat "$work/err"; fail=1
fi

make_model "$work/trunc_header"
truncate -s 40 "$work/trunc_header/model.safetensors"
expect "safetensors cut inside the header" "model\.safetensors" "$KESTREL" run "$work/trunc_header" -p abc

make_model "$work/trunc_data"
size=$(stat -c %s "$work/trunc_data/model.safetensors")
truncate -s $((size - 1000)) "$work/trunc_data/model.safetensors"
expect "safetensors cut inside the data (offsets past the end)" "model\.safetensors.*(tensor|offset)" \
    "$KESTREL" run "$work/trunc_data" -p abc

make_model "$work/hdr_len"
printf '\xff\xff\xff\xff\xff\xff\x00\x00' | dd of="$work/hdr_len/model.safetensors" bs=1 count=8 conv=notrunc 2>/dev/null
expect "header length larger than the file" "model\.safetensors" "$KESTREL" run "$work/hdr_len" -p abc

make_model "$work/lying_offsets"
# same-length edit of the first tensor's data_offsets end: "[0,16384]"-style -> bigger number
perl -0pi -e 's/("data_offsets":\[0,)(\d)/$1.($2 eq "9" ? "8" : "9")/e' "$work/lying_offsets/model.safetensors"
expect "header lying about offsets" "model\.safetensors.*tensor" "$KESTREL" run "$work/lying_offsets" -p abc

make_model "$work/bad_dtype"
perl -0pi -e 's/"dtype":"F32"/"dtype":"Q32"/' "$work/bad_dtype/model.safetensors"
expect "unknown dtype" "model\.safetensors.*Q32" "$KESTREL" run "$work/bad_dtype" -p abc

make_model "$work/missing_shard"
mv "$work/missing_shard/model.safetensors" "$work/missing_shard/model-00001-of-00002.safetensors"
cat > "$work/missing_shard/model.safetensors.index.json" <<'JSON'
{"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                                "model.norm.weight": "model-00002-of-00002.safetensors"}}
JSON
expect "missing shard" "model-00002-of-00002\.safetensors" "$KESTREL" run "$work/missing_shard" -p abc

make_model "$work/bad_arch"
sed -i 's/LlamaForCausalLM/FooForCausalLM/; s/"model_type": "llama"/"model_type": "foo"/' "$work/bad_arch/config.json"
expect "unknown architecture" "config\.json.*FooForCausalLM" "$KESTREL" run "$work/bad_arch" -p abc

make_model "$work/bad_config_field"
sed -i 's/"hidden_size": 64/"hidden_size": "big"/' "$work/bad_config_field/config.json"
expect "config field of the wrong type" "config\.json.*hidden_size" "$KESTREL" run "$work/bad_config_field" -p abc

make_model "$work/bad_shape"
sed -i 's/"intermediate_size": 128/"intermediate_size": 96/' "$work/bad_shape/config.json"
expect "tensor shape disagrees with config" "model\.safetensors.*tensor.*shape" "$KESTREL" run "$work/bad_shape" -p abc

make_model "$work/bad_tok"
echo '{"model": {"type": "BPE", "vocab": [1, 2' > "$work/bad_tok/tokenizer.json"
expect "malformed tokenizer.json" "tokenizer\.json" "$KESTREL" run "$work/bad_tok" -p abc

make_model "$work/bad_tok_type"
echo '{"model": {"type": "WordPiece", "vocab": {}}}' > "$work/bad_tok_type/tokenizer.json"
expect "unsupported tokenizer model" "tokenizer\.json.*WordPiece" "$KESTREL" run "$work/bad_tok_type" -p abc

expect "missing model directory" "nonexistent" "$KESTREL" run "$work/nonexistent" -p abc
expect "bad -n value" "-n" "$KESTREL" run "$work/good" -p abc -n lots
expect "unknown option" "--frobnicate" "$KESTREL" run "$work/good" -p abc --frobnicate
expect "unknown KV type" "--kv-type f16: expected bf16 or f32" "$KESTREL" run "$work/good" -p abc --kv-type f16 --device cpu
expect "KV type without a value" "--kv-type needs a value" "$KESTREL" run "$work/good" -p abc --kv-type
expect "tokenize: missing file" "nope" "$KESTREL" tokenize "$work/nope/tokenizer.json" "hi"

# a DFlash drafter that does not fit the model: refused with one line naming it
mkdir -p "$work/dflash_misfit"
cat > "$work/dflash_misfit/config.json" <<'JSON'
{"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
 "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
 "dflash_config": {"block_size": 8, "mask_token_id": 255, "target_layer_ids": [0, 40]}}
JSON
expect "DFlash drafter with a layer the model lacks" "dflash_misfit.*(layer 40|hidden size)" \
    "$KESTREL" run "$work/good" -p abc --drafter "$work/dflash_misfit"

exit $fail
