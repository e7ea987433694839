#!/usr/bin/env bash
# The CLI explains itself: every command has a help (`infer CMD --help`, `-h`
# and `infer help CMD` print the same), every flag that a command's parser
# accepts appears in that command's help, every flag the help lists is
# accepted, and every flag spelled in a command's source is in the help of
# that command. Needs no model.
#
#   cli_help_test.sh PATH_TO_INFER_BINARY SOURCE_DIR
set -u
INFER=${1:?usage: cli_help_test.sh INFER SOURCE_DIR}
SRC=${2:?usage: cli_help_test.sh INFER SOURCE_DIR}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/infer-help-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok   - $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL - $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | head -n 20 | sed 's/^/       /'; }

"$INFER" --help >"$TMP/top" 2>&1 || fail "infer --help exits 0"
cmds=$(sed -n '/^commands:/,/^$/p' "$TMP/top" | awk 'NF >= 2 && $1 != "commands:" {print $1}')
[ -n "$cmds" ] && pass "infer --help lists commands: $(echo $cmds | tr '\n' ' ')" || fail "infer --help lists no command" "$(cat "$TMP/top")"

# Flags of one command's help: the "options:" block, first column(s).
help_flags() {
  sed -n '/^options:/,/^$/p' "$1" | grep -E '^  -' | sed -E 's/^  //; s/  +.*$//' |
    awk '{ for (i = 1; i <= NF; i++) { f = $i; sub(/,$/, "", f); if (f ~ /^-/) print f } }'
}
# The value placeholder of a flag in the help ("" for a switch): the last
# word before the description when it is not a flag.
help_arg() {
  grep -E "^  ([^ ]+, )*$2(,| |\$)" "$1" | head -n 1 | sed -E 's/^  //; s/  +.*$//' |
    awk '{ if ($NF !~ /^-/) print $NF }'
}

for c in $cmds; do
  "$INFER" "$c" --help >"$TMP/$c.help" 2>"$TMP/$c.err"; rc1=$?
  "$INFER" "$c" -h >"$TMP/$c.h" 2>&1; rc2=$?
  "$INFER" help "$c" >"$TMP/$c.helpcmd" 2>&1; rc3=$?
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && cmp -s "$TMP/$c.help" "$TMP/$c.h" &&
     cmp -s "$TMP/$c.help" "$TMP/$c.helpcmd" && grep -q "^usage: infer $c" "$TMP/$c.help"; then
    pass "$c: --help, -h and 'infer help $c' print the same help"
  else
    fail "$c: help ($rc1 $rc2 $rc3)" "$(head -c 600 "$TMP/$c.help" "$TMP/$c.err")"
  fi
  help_flags "$TMP/$c.help" | sort -u >"$TMP/$c.flags"
  # Every flag in the help is accepted: `infer CMD FLAG [VALUE] --help`
  # parses the whole line, then prints the help (exit 0); an unknown flag
  # would exit 2 first.
  bad=""
  while read -r f; do
    [ "$f" = "-h" ] || [ "$f" = "--help" ] && continue
    arg=$(help_arg "$TMP/$c.help" "$f")
    if [ -n "$arg" ]; then "$INFER" "$c" "$f" 1 --help >/dev/null 2>"$TMP/e"; else "$INFER" "$c" "$f" --help >/dev/null 2>"$TMP/e"; fi
    [ $? -eq 0 ] || bad="$bad $f($(head -c 100 "$TMP/e"))"
  done <"$TMP/$c.flags"
  [ -z "$bad" ] && pass "$c: every flag of its help is accepted ($(wc -l <"$TMP/$c.flags") flags)" || fail "$c: flags listed but refused:$bad"
  # An unknown flag is refused with a pointer to the help.
  "$INFER" "$c" --no-such-flag-xyz >/dev/null 2>"$TMP/e"; rc=$?
  if [ $rc -eq 2 ] && grep -q "unknown flag --no-such-flag-xyz" "$TMP/e"; then pass "$c: an unknown flag is a usage error"; else fail "$c: unknown flag (exit $rc)" "$(cat "$TMP/e")"; fi
done

# Every flag spelled in a command's source is in that command's help. The
# source of command NAME is the part of examples/cli/*.cpp from its flag
# table's definition to the next table's (each command's function follows
# its table); shared groups live in cli.h and are
# checked through the commands that use them (the parser refuses to read a
# flag its table lacks: Args::key throws).
for f in "$SRC"/examples/cli/cmd_*.cpp "$SRC"/examples/server/*.cpp; do
  # Chunks start at each flag table's definition; Register lines map each
  # command to its table.
  awk -v out="$TMP/tab" '
    /^const FlagTable k[A-Za-z]*Flags/ { match($0, /k[A-Za-z]*Flags/); cur = out "." substr($0, RSTART, RLENGTH) }
    cur != "" { print >> cur }' "$f"
  grep -oE 'Register k[A-Za-z]*\{\{"[^"]+"' "$f" | sed -E 's/.*"([^"]+)"/\1/' >"$TMP/names"
  grep -oE '&k[A-Za-z]*Flags' "$f" | tr -d '&' >"$TMP/tables"
  paste "$TMP/names" "$TMP/tables" >>"$TMP/map"
done
while read -r name table; do cp "$TMP/tab.$table" "$TMP/chunk.$name" 2>/dev/null; done <"$TMP/map"
for c in $cmds; do
  [ -f "$TMP/chunk.$c" ] || { fail "$c: no source chunk found for it"; continue; }
  missing=""
  for lit in $(grep -oE '"--?[a-z][a-z0-9-]*"' "$TMP/chunk.$c" | tr -d '"' | sort -u); do
    grep -qxF -- "$lit" "$TMP/$c.flags" || missing="$missing $lit"
  done
  [ -z "$missing" ] && pass "$c: every flag in its source is in its help" || fail "$c: flags in the source but not in the help:$missing"
done

# Defaults are shown: every valued flag of run says its default or that it has none.
n_def=$(grep -c "(default: " "$TMP/run.help")
[ "$n_def" -ge 15 ] && pass "run --help shows defaults ($n_def)" || fail "run --help shows $n_def defaults"

"$INFER" help no-such-command >/dev/null 2>&1 && fail "infer help of an unknown command fails" || pass "infer help of an unknown command fails"

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
