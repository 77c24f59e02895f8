#!/usr/bin/env bash
# Damaged GGUF files through `qwen35_generate --info`: each must exit 1 (never a signal) with one
# error line that names the file and the specific problem.
#   test_cli_malformed.sh CLI MODEL.gguf WORK_DIR
set -u
cli=$1 model=$2 work=$3
mkdir -p "$work"
size=$(stat -c %s "$model")
failures=0 checked=0

# expect NAME FILE SUBSTRING: runs --info on FILE, wants rc 1 and SUBSTRING on stderr
expect() {
  local name=$1 file=$2 want=$3 rc err
  "$cli" -m "$file" --info >/dev/null 2>"$work/err.txt"
  rc=$?
  err=$(cat "$work/err.txt")
  checked=$((checked + 1))
  if [[ $rc -ne 1 || "$err" != *"$want"* || "$err" != "qwen35_generate: error: $file"* ]]; then
    echo "FAIL $name: rc=$rc stderr='$err' (expected rc 1 and '$want')"
    failures=$((failures + 1))
  fi
}

# patch FILE OFFSET HEXBYTES: overwrites bytes in place
patch() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

f="$work/damaged.gguf"
# truncated inside each header field, inside the metadata, inside the tensor infos and the data
for cut in 0 3 7 15 23 24 100 5000 12000 200000 $((size - 1)); do
  head -c "$cut" "$model" >"$f"
  case $cut in
    0 | 3) want="magic needs 4 bytes" ;;
    7) want="version needs 4 bytes" ;;
    15) want="tensor count needs 8 bytes" ;;
    23) want="metadata count needs 8 bytes" ;;
    200000 | $((size - 1))) want="runs past the end of the file" ;;
    *) want="truncated" ;;
  esac
  expect "truncated at $cut" "$f" "$want"
done
cp "$model" "$f" && patch "$f" 0 'GGUX' && expect "bad magic" "$f" "bad magic"
cp "$model" "$f" && patch "$f" 4 '\x09' && expect "bad version" "$f" "unsupported GGUF version 9"
cp "$model" "$f" && patch "$f" 8 '\xff\xff\xff\xff\xff\xff\xff\x0f' && expect "absurd tensor count" "$f" "tensor count = 1152921504606846975"
cp "$model" "$f" && patch "$f" 16 '\xff\xff\xff\xff\xff\xff\xff\x0f' && expect "absurd metadata count" "$f" "metadata count = 1152921504606846975"
# an architecture q35 does not know: the value of general.architecture rewritten in place
cp "$model" "$f" && perl -0777 -pi -e 's/(general\.architecture.{12})qwen35/${1}llama9/s' "$f" &&
  expect "unknown architecture" "$f" "llama9"

echo "cli malformed-file checks: $((checked - failures)) passed, $failures failed"
exit $((failures != 0))
