#!/usr/bin/env bash
# Tensor parallelism against one process (issue #31), interleaved:
#
#   bench/tp_bench.sh [INFER=build/bin/infer] [ROUNDS=5]
#
# On the TinyLlama-shaped Q4_0 (made once when missing:
#   infer synth --preset tinyllama-1.1b --type q4_0 -o /tmp/tl-q4_0.gguf, or $TL)
# it measures the prefill of a 512-token prompt and single-sequence decode for
#   single_t1   one process, 1 thread
#   single_t2   one process, 2 threads
#   tp2_t1      mpirun -np 2 --bind-to core, --tp 2, 1 thread per rank (shared memory)
#   tp2_t1_tcp  the same with TCP forced over loopback (--mca btl tcp,self)
# one run of each per round, the order rotated every round, and prints the
# median of each figure, its ratio to single_t1, and the communication time
# per decoded token that infer bench --tp reports. Run it on a quiet machine
# (nothing else running: each configuration wants the cores to itself).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
infer=${1:-$here/../build/bin/infer}
rounds=${2:-5}
tl=${TL:-/tmp/tl-q4_0.gguf}
np=${NP:-512}
ng=${NG:-64}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$infer" ] || { echo "no infer binary at $infer" >&2; exit 1; }
[ -f "$tl" ] || "$infer" synth --preset tinyllama-1.1b --type q4_0 -o "$tl" >&2
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

bench=(bench -m "$tl" -p "$np" -n "$ng" -r 1 --json)
one() {  # one CONFIG: prints "CONFIG key value" lines
  local cfg=$1 out
  case $cfg in
    single_t1) out=$("$infer" "${bench[@]}" -t 1 2>/dev/null) ;;
    single_t2) out=$("$infer" "${bench[@]}" -t 2 2>/dev/null) ;;
    tp2_t1) out=$(mpirun --bind-to core -np 2 "$infer" "${bench[@]}" --tp 2 -t 1 2>/dev/null) ;;
    tp2_t1_tcp) out=$(mpirun --bind-to core --mca btl tcp,self --mca btl_tcp_if_include lo -np 2 \
                        "$infer" "${bench[@]}" --tp 2 -t 1 2>/dev/null) ;;
  esac
  # Every number of the JSON line (decode/prefill tok/s, the communication
  # figures of --tp, whatever their names).
  echo "$out" | python3 -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"): continue
    for k, v in json.loads(line).items():
        if isinstance(v, (int, float)): print(sys.argv[1], k, v)
' "$cfg"
}

cfgs=(single_t1 single_t2 tp2_t1 tp2_t1_tcp)
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; model $tl; prompt $np, decode $ng; $rounds rounds" >&2
for ((r = 0; r < rounds; r++)); do
  echo "# round $((r + 1)) load $(cut -d' ' -f1 /proc/loadavg)" >&2
  for ((i = 0; i < ${#cfgs[@]}; i++)); do
    cfg=${cfgs[$(((i + r) % ${#cfgs[@]}))]}
    one "$cfg" | tee -a "$raw" >&2
  done
done

python3 - "$raw" "${cfgs[@]}" <<'EOF'
import statistics, sys
raw, cfgs = sys.argv[1], sys.argv[2:]
vals = {}
for line in open(raw):
    c, k, v = line.split()
    vals.setdefault(c, {}).setdefault(k, []).append(float(v))
med = {c: {k: statistics.median(v) for k, v in d.items()} for c, d in vals.items()}
def get(c, k):
    return med.get(c, {}).get(k)
base_d, base_p = get("single_t1", "decode_tokens_per_s"), get("single_t1", "prefill_tokens_per_s")
print("| configuration | decode tok/s | x single -t 1 | prefill 512 tok/s | x single -t 1 | "
      "comm ms / token | comm share of decode | comm KB / token |")
print("|---|---|---|---|---|---|---|---|")
for c in cfgs:
    d, p = get(c, "decode_tokens_per_s"), get(c, "prefill_tokens_per_s")
    if d is None:
        print(f"| {c} | (no result) |")
        continue
    row = f"| {c} | {d:.2f} | {d / base_d:.2f} | {p:.1f} | {p / base_p:.2f} |"
    cm, by, st = get(c, "comm_ms_per_token"), get(c, "decode_comm_bytes"), get(c, "decode_steps")
    if cm is not None:
        row += f" {cm:.2f} | {cm * d / 1000:.0%} |"
        row += f" {by / st / 1024:.0f} |" if by and st else " - |"
    else:
        row += " - | - | - |"
    print(row)
print(f"(medians of {len(vals.get('single_t1', {}).get('decode_tokens_per_s', []))} interleaved runs)")
EOF
