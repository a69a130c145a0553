#!/usr/bin/env bash
# device call wrapper (not committed)
export AB_MODELS=none
export JSON_EXTRAS='{} {"temperature":0.7,"top_p":0.95} {"frequency_penalty":0.5,"presence_penalty":0.5} {"response_format":{"type":"json_object"},"temperature":0.7,"top_p":0.95}'
timeout 580 bash bench/gpu_session.sh "$OUT" "test ab json"
git log --oneline -1 > "$OUT/commit.txt"
