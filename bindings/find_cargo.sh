# Sourced by run_test.sh and consumer_test.sh: sets $cargo to Debian's cargo
# (/usr/bin) when present, else the one in PATH, and exports RUSTC and RUSTDOC
# from the same folder (CI has only Debian's; a rustup toolchain elsewhere in
# PATH must not mix its rustc with Debian's cargo). Calls skip() when none.
cargo=""
for cand in /usr/bin/cargo "$(command -v cargo || true)"; do
  if [ -n "$cand" ] && [ -x "$cand" ]; then cargo=$cand; break; fi
done
[ -n "$cargo" ] || skip "cargo not found (Debian: cargo)"
if [ -x "$(dirname "$cargo")/rustc" ]; then export RUSTC="$(dirname "$cargo")/rustc"; fi
if [ -x "$(dirname "$cargo")/rustdoc" ]; then export RUSTDOC="$(dirname "$cargo")/rustdoc"; fi
