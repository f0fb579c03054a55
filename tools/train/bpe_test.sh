#!/usr/bin/env bash
# Test of tools/train/bpe.py (ctest label unit): a tokenizer trained on a generated world loads
# in TLR's C++ tokenizer, keeps attribute values and function words whole, splits made-up names,
# and decodes its own ids back to the text. Usage: bpe_test.sh PYTHON TLR
set -u
py=$1
tlr=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
"$py" "$here/../worldgen/worldgen.py" --seed 3 --things 300 --out "$tmp/w" >/dev/null || fail=1
"$py" "$here/bpe.py" --corpus "$tmp/w/corpus.txt" --vocab 400 --out "$tmp/tok.json" >/dev/null || fail=1
text="Answer: marsh. A zinthar is found in the marsh."
out=$("$tlr" tokenize --tokenizer "$tmp/tok.json" "$text") || fail=1
grep -q "> ' marsh'" <<<"$out" || { echo "FAIL: ' marsh' is not one token"; fail=1; }
grep -q "> ' found'" <<<"$out" || { echo "FAIL: ' found' is not one token"; fail=1; }
grep -q "> ' zinthar'" <<<"$out" && { echo "FAIL: a made-up name is one token"; fail=1; }
ids=$("$tlr" tokenize --tokenizer "$tmp/tok.json" --ids-only "$text")
back=$("$tlr" tokenize --tokenizer "$tmp/tok.json" --decode $ids)
[ "$back" = "$text" ] || { echo "FAIL: decode gave '$back'"; fail=1; }
if [ "$fail" = 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit $fail
