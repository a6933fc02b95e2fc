#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 300) with the committed seed corpora;
# findings land in fuzz/artifacts/<target>/. Needs nightly and `cargo install cargo-fuzz`.
set -euo pipefail
cd "$(dirname "$0")"
secs=${SECONDS_PER_TARGET:-300}
for t in list_options label_selector field_selector continue_token ingest; do
  mkdir -p "runs/$t"
  cargo +nightly fuzz run -O "$t" "runs/$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 \
    2>&1 | tee "logs-$t.txt" | grep -E "^#[0-9]+ +DONE|Done [0-9]+ runs|SUMMARY|panicked" || true
done
