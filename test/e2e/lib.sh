# Shared by the e2e shell tests: `check NAME CONDITION` reports and records failures in $fail,
# `losses FILE` prints a metrics file's losses (6 digits), `iteration_losses FILE` prints
# "iteration loss" per line with 5 digits (runs on different rank counts sum in another order).
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
losses() { grep -o '"loss": [-0-9.e]*' "$1" | awk '{printf "%.6f\n", $2}'; }
iteration_losses() {
  tr -d ' \n' < "$1" | grep -o '"iteration":[0-9]*,"loss":[-0-9.e]*' |
    sed 's/"iteration":\([0-9]*\),"loss":\(.*\)/\1 \2/' | awk '{printf "%d %.5f\n", $1, $2}'
}
