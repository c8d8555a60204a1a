# Helpers the end-to-end scripts share; sourced after they set DTRAIN and TMP.
#   fail MESSAGE                   print FAIL: MESSAGE and exit 1
#   expect_error PATTERN ARGS...   dtrain ARGS must exit 2 with one stderr line matching PATTERN

fail() { echo "FAIL: $*" >&2; exit 1; }

expect_error() {
  local pattern=$1; shift
  set +e
  "$DTRAIN" "$@" > "$TMP/out.txt" 2> "$TMP/err.txt"
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || { cat "$TMP/err.txt" >&2; fail "expected exit 2 from: $*, got $rc"; }
  [[ $(wc -l < "$TMP/err.txt") -eq 1 ]] || { cat "$TMP/err.txt" >&2; fail "expected one line from: $*"; }
  grep -q -- "$pattern" "$TMP/err.txt" || { cat "$TMP/err.txt" >&2; fail "expected '$pattern' from: $*"; }
}
