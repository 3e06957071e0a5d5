#!/usr/bin/env bash
# Refit every shipped fusion model and print every retrieval table, in the order each step needs the one
# before: what a change to the recall features or the stores' index text needs (docs/retrieval.md).
# Each step's output goes to $OUT/<step>.txt (default experiments/bench/refit-out/, not committed).
# Needs $DKILAB_DATA_DIR. About 2 hours on 2 cores from cold caches (e5 stores are most of it).
#     bash experiments/bench/refit.sh [FIRST_STEP]    (restart at a step: study, train, ablations, bench, lodo, rule)
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${DKILAB_DATA_DIR:?set DKILAB_DATA_DIR to the datasets directory}"
OUT=${OUT:-experiments/bench/refit-out}
BIN=${BIN:-.venv/bin}
mkdir -p "$OUT"
steps=(study train ablations bench lodo rule)
start=${1:-study}
run() {  # run STEP-NAME COMMAND...: its output to $OUT/STEP-NAME.txt, timed
    local name=$1; shift
    echo "$(date -u +%H:%M:%S) $name: $*"
    { time "$@"; } > "$OUT/$name.txt" 2>&1 || { echo "$name failed: see $OUT/$name.txt"; exit 1; }
}
go=0
for step in "${steps[@]}"; do
    [[ $step == "$start" ]] && go=1
    ((go)) || continue
    case $step in
    study)  # the fine-tuned encoder's fusion part, out of fold (the adapter is left as it is)
        run study "$BIN/python" experiments/bench/finetune_encoder_dev.py --lora 8 --lr 2e-4 --fusion-only ;;
    train)  # the shipped model, dkilab/recall/fusion_lr.json
        run train "$BIN/dkilab" bench retrieval --train ;;
    ablations)  # the models of the bench's ablation rows (experiments/retrieval_bench.yaml)
        run unguarded "$BIN/dkilab" bench retrieval --train --no-guard --out experiments/models/fusion_lr_unguarded.json
        run no_cue_parts "$BIN/dkilab" bench retrieval --train --no-cue-parts --out experiments/models/fusion_lr_no_cue_parts.json
        run e5_english "$BIN/dkilab" bench retrieval --train --english offline:minilm --english-e5-part \
            --out experiments/models/fusion_lr_e5_english.json
        run turn_alone "$BIN/dkilab" bench retrieval --train --english offline:minilm --turn-alone \
            --out experiments/models/fusion_lr_turn_alone.json ;;
    bench)
        run bench_peers "$BIN/dkilab" bench retrieval --peers
        run bench_mrr "$BIN/dkilab" bench retrieval --metric mrr ;;
    lodo)
        run lodo "$BIN/dkilab" bench retrieval --leave-one-dataset-out --turn-alone
        run lodo_mrr "$BIN/dkilab" bench retrieval --leave-one-dataset-out --metric mrr
        run lodo_turn_alone_mrr "$BIN/dkilab" bench retrieval --leave-one-dataset-out --turn-alone --metric mrr ;;
    rule)  # the dev studies behind choices every fit above keeps (dev rows only; docs/retrieval.md): the C rule
        # ("How C is chosen") and one vector per message, not two (after "Stores embed each turn ...")
        run c_rule_dev "$BIN/python" experiments/bench/c_rule_dev.py
        run two_vectors_dev "$BIN/python" experiments/bench/two_vectors_dev.py ;;
    esac
done
((go)) || { echo "unknown step $start: one of ${steps[*]}"; exit 2; }
echo "$(date -u +%H:%M:%S) done: $OUT"
